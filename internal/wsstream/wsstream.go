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

// SetWriteDeadline bounds the writes that follow, as net.Conn's does: a write that cannot
// finish by t fails, and the websocket is unusable afterwards.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.SetWriteDeadline(t)
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
			// A ping that cannot be sent means a peer that is gone or no longer reads:
			// closing ends whatever copies to or from this stream.
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
				_ = c.Close()
				return
			}
		}
	}
}

// Splice copies both ways until either side ends, then closes both.
func Splice(a, b io.ReadWriteCloser) { SpliceTimeout(a, b, 0) }

// writeDeadliner is a stream whose writes can be bounded in time (net.Conn, Conn).
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

// SpliceTimeout is Splice where no single write may block longer than writeTimeout (0: no
// bound) on a side that supports write deadlines: a peer that stops reading fails the write,
// which ends the splice and closes both sides, so it cannot hold the copying goroutines.
func SpliceTimeout(a, b io.ReadWriteCloser, writeTimeout time.Duration) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src io.ReadWriteCloser) {
		defer wg.Done()
		_ = copyTimeout(dst, src, writeTimeout)
		_ = dst.Close()
		_ = src.Close()
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// copyTimeout is io.Copy with a deadline set before every write. It does not use WriterTo or
// ReaderFrom, which would write without the deadline.
func copyTimeout(dst io.Writer, src io.Reader, d time.Duration) error {
	wd, _ := dst.(writeDeadliner)
	if d <= 0 {
		wd = nil
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if wd != nil {
				if err := wd.SetWriteDeadline(time.Now().Add(d)); err != nil {
					return err
				}
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}
