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

// SpliceTimeout is Splice where a write to either side that blocks longer than writeTimeout
// (0: no bound) ends it too: a peer that stops reading does not hold the stream.
func SpliceTimeout(a, b io.ReadWriteCloser, writeTimeout time.Duration) {
	wsstream.SpliceTimeout(a, b, writeTimeout)
}
