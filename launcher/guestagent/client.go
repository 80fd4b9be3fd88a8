// Package guestagent talks to a guest's qemu-ga over the virtio-serial channel QEMU exposes
// as a unix socket. The wire format is QMP's JSON (without a greeting or capabilities), and
// since the channel outlives the agent (a restarted agent may find a half-read request), each
// session starts with guest-sync-delimited: the answer to it follows a 0xFF byte, and anything
// before that is a stale reply to be dropped.
package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"
)

// Client is one session with the agent. It is not safe for concurrent use.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
}

// Dial connects to the channel's socket and synchronises with the agent.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn)}
	if err := c.sync(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Close ends the session.
func (c *Client) Close() error { return c.conn.Close() }

// Error is an error the agent answered with.
type Error struct{ Class, Desc string }

func (e *Error) Error() string { return "guest agent: " + e.Class + ": " + e.Desc }

type reply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// sync discards whatever the channel holds from an earlier session.
func (c *Client) sync(ctx context.Context) error {
	id := rand.Int64N(1 << 50)
	if err := c.send(ctx, "guest-sync-delimited", map[string]int64{"id": id}); err != nil {
		return err
	}
	for {
		if _, err := c.r.ReadBytes(0xFF); err != nil {
			return fmt.Errorf("guest agent sync: %w", err)
		}
		var r reply
		if err := c.readReply(&r); err != nil {
			continue // a partial stale reply after a 0xFF in it
		}
		var got int64
		if json.Unmarshal(r.Return, &got) == nil && got == id {
			return nil
		}
	}
}

func (c *Client) send(ctx context.Context, command string, args any) error {
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return err
	}
	_, err = c.conn.Write(append(b, '\n'))
	return err
}

func (c *Client) readReply(r *reply) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return err
	}
	line = bytes.TrimLeft(line, "\xff")
	return json.Unmarshal(line, r)
}

// Execute runs command with args (nil for none) and decodes its return value into out (nil
// to discard it).
func (c *Client) Execute(ctx context.Context, command string, args, out any) error {
	if err := c.send(ctx, command, args); err != nil {
		return err
	}
	var r reply
	if err := c.readReply(&r); err != nil {
		return fmt.Errorf("guest agent %s: %w", command, err)
	}
	if r.Error != nil {
		return &Error{Class: r.Error.Class, Desc: r.Error.Desc}
	}
	if out == nil || len(r.Return) == 0 {
		return nil
	}
	return json.Unmarshal(r.Return, out)
}

// IsCommandNotFound reports an agent that does not offer the command (older agents, or one
// built without it).
func IsCommandNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Class == "CommandNotFound"
}
