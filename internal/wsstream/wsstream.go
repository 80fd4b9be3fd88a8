// Package wsstream carries a byte stream over a websocket the way KubeVirt's console, VNC and
// port-forward streams do: every write is one binary message, text messages are skipped, and a
// close frame reads as EOF. virt-api, the node agent and virtctl all speak it.
package wsstream

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Subprotocol is the websocket subprotocol of every stream, as KubeVirt's.
const Subprotocol = "plain.kubevirt.io"

// Conn is a websocket as an io.ReadWriteCloser.
type Conn struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	r      io.Reader
	once   sync.Once
	closed chan struct{}
}

// New wraps ws. With a ping interval above zero it keeps idle sessions alive through proxies
// that drop silent connections.
func New(ws *websocket.Conn, ping time.Duration) *Conn {
	c := &Conn{ws: ws, closed: make(chan struct{})}
	if ping > 0 {
		go c.ping(ping)
	}
	return c
}

func (c *Conn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			r, err := c.nextBinary()
			if err != nil {
				return 0, err
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

// ReadMessage returns the next binary message whole, for datagram streams (UDP forwarding).
// It must not be mixed with Read.
func (c *Conn) ReadMessage() ([]byte, error) {
	r, err := c.nextBinary()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func (c *Conn) nextBinary() (io.Reader, error) {
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		if typ == websocket.BinaryMessage {
			return r, nil
		}
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close says goodbye with a close frame, then drops the connection. WriteControl may run
// concurrently with a blocked Write, so no lock is taken.
func (c *Conn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		err = c.ws.Close()
	})
	return err
}

func (c *Conn) ping(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
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
