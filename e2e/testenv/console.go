package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Console is a client of a VM's serial console socket that keeps everything it has read.
type Console struct {
	conn net.Conn
	mu   sync.Mutex
	buf  bytes.Buffer
	wake chan struct{}
	done chan struct{}
}

// DialConsole connects to a serial chardev socket, retrying while QEMU creates it.
func DialConsole(t testing.TB, path string) *Console {
	t.Helper()
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("unix", path); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("console %s: %v", path, err)
	}
	c := &Console{conn: conn, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { conn.Close() })
	return c
}

func (c *Console) read() {
	defer close(c.done)
	b := make([]byte, 4096)
	for {
		n, err := c.conn.Read(b)
		if n > 0 {
			c.mu.Lock()
			c.buf.Write(b[:n])
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// Output is everything read so far.
func (c *Console) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// WaitFor waits until the output contains s.
func (c *Console) WaitFor(ctx context.Context, s string) error {
	for {
		if strings.Contains(c.Output(), s) {
			return nil
		}
		select {
		case <-c.wake:
		case <-c.done:
			if strings.Contains(c.Output(), s) {
				return nil
			}
			return fmt.Errorf("console closed before %q appeared; output:\n%s", s, c.Output())
		case <-ctx.Done():
			return fmt.Errorf("%q not seen on the console: %w; output:\n%s", s, ctx.Err(), c.Output())
		}
	}
}

// Type sends keystrokes to the guest.
func (c *Console) Type(s string) error {
	_, err := c.conn.Write([]byte(s))
	return err
}
