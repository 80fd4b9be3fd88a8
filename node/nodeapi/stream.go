package nodeapi

import (
	"io"
	"time"

	"github.com/gorilla/websocket"

	"github.com/qvirt/qvirt/internal/wsstream"
)

// PingInterval keeps idle streams alive through proxies that drop silent connections.
const PingInterval = 20 * time.Second

// NewWebsocketStream wraps ws as a stream that pings until it is closed.
func NewWebsocketStream(ws *websocket.Conn) io.ReadWriteCloser { return wsstream.New(ws, PingInterval) }

// Splice copies both ways until either side ends, then closes both.
func Splice(a, b io.ReadWriteCloser) { wsstream.Splice(a, b) }
