package nodeapi

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// PingInterval keeps idle streams alive through proxies that drop silent connections.
const PingInterval = 20 * time.Second

// wsConn adapts a websocket to io.ReadWriteCloser: every Write is one binary message, text
// messages are ignored, and a close frame reads as EOF.
type wsConn struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	r      io.Reader
	closed chan struct{}
	once   sync.Once
}

// NewWebsocketStream wraps ws and starts sending pings until it is closed.
func NewWebsocketStream(ws *websocket.Conn) io.ReadWriteCloser {
	c := &wsConn{ws: ws, closed: make(chan struct{})}
	go c.ping()
	return c
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	return c.ws.Close()
}

func (c *wsConn) ping() {
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
			c.wmu.Lock()
			err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second))
			c.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// Splice copies both ways until either side ends, then closes both.
func Splice(a, b io.ReadWriteCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src io.ReadWriteCloser) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
