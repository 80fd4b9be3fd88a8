package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goqmp "github.com/digitalocean/go-qemu/qmp"
	"github.com/go-logr/logr"
)

// Client is a QMP connection. It is safe for concurrent use: commands are
// tagged with an id and may be in flight together; replies are matched by id.
type Client struct {
	conn    *net.UnixConn
	log     logr.Logger
	timeout time.Duration

	version      goqmp.Version
	capabilities []string

	// wlock serialises writes so a command and its file descriptor leave in
	// one piece; it is a channel so waiting for it honours contexts.
	wlock chan struct{}

	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan *message

	events fanout

	done       chan struct{}
	readerDone chan struct{}
	closeOnce  sync.Once
	err        error // set once, before done is closed
}

// request is a command on the wire: go-qemu's Command plus the id QEMU echoes
// back in the reply.
type request struct {
	goqmp.Command
	ID uint64 `json:"id"`
}

// message is anything QEMU sends: the greeting, a reply or an event.
type message struct {
	goqmp.Event
	QMP    *greeting       `json:"QMP"`
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
}

type greeting struct {
	Version      goqmp.Version `json:"version"`
	Capabilities []string      `json:"capabilities"`
}

// handshakeID tags qmp_capabilities; commands start at 1.
const handshakeID = 0

// Dial connects to the QMP socket at socketPath and completes the handshake
// (greeting and qmp_capabilities). ctx bounds the whole handshake, not the
// connection, which lives until Close or QEMU goes away; if ctx has no
// deadline the client timeout (WithTimeout, default 10s) applies. QEMU
// serves one QMP client per socket, so Dial times out while another client is
// connected. Events QEMU sends during the handshake are not delivered.
func Dial(ctx context.Context, socketPath string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := withTimeout(ctx, o.timeout)
	defer cancel()

	conn, err := dial(ctx, socketPath, o.retryInterval)
	if err != nil {
		return nil, err
	}
	c := &Client{
		conn:       conn,
		log:        o.log.WithValues("socket", socketPath),
		timeout:    o.timeout,
		wlock:      make(chan struct{}, 1),
		pending:    make(map[uint64]chan *message),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	dec, err := c.handshake(ctx)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp handshake on %s: %w", socketPath, err)
	}
	c.log.V(1).Info("QMP connected", "qemu", c.version.String())
	go c.readLoop(dec)
	return c, nil
}

func dial(ctx context.Context, socketPath string, retry time.Duration) (*net.UnixConn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", socketPath)
		if err == nil {
			return conn.(*net.UnixConn), nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("qmp dial %s: %w", socketPath, ctxError(ctx))
		}
		if retry <= 0 || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, fmt.Errorf("qmp dial %s: %w", socketPath, err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("qmp dial %s: %w (last error: %v)", socketPath, ctxError(ctx), err)
		case <-t.C:
		}
	}
}

// handshake reads the greeting and negotiates capabilities under ctx. It
// returns the decoder for the reader, which may already hold buffered input.
func (c *Client) handshake(ctx context.Context) (*json.Decoder, error) {
	deadline, _ := ctx.Deadline()
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*json.Decoder, error) {
		stop()
		if ctx.Err() != nil || isDeadline(err) {
			return nil, ctxErrorOr(ctx, err)
		}
		return nil, connError(err)
	}

	dec := json.NewDecoder(c.conn)
	var m message
	if err := dec.Decode(&m); err != nil {
		return fail(err)
	}
	if m.QMP == nil {
		return fail(errors.New("first message is not a QMP greeting"))
	}
	c.version, c.capabilities = m.QMP.Version, m.QMP.Capabilities

	b, err := json.Marshal(request{Command: goqmp.Command{Execute: "qmp_capabilities"}, ID: handshakeID})
	if err != nil {
		return fail(err)
	}
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fail(err)
	}
	// Skip events until our reply: QEMU may emit one between the two.
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			return fail(err)
		}
		if m.Event.Event != "" {
			c.log.V(1).Info("QMP event during handshake not delivered", "event", m.Event.Event)
			continue
		}
		if id, ok := parseID(m.ID); !ok || id != handshakeID {
			return fail(fmt.Errorf("unexpected message during handshake: id %s", m.ID))
		}
		if m.Error != nil {
			return fail(fmt.Errorf("qmp_capabilities: %w", m.Error))
		}
		break
	}
	if !stop() {
		// ctx ended as the handshake finished; the deadline may be poisoned.
		return nil, ctxError(ctx)
	}
	if err := c.conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return dec, nil
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// ctxErrorOr returns the context's error for an I/O error caused by it.
// Socket deadlines are only ever set from the context, so a deadline error
// means the context is ending; wait for it to say so, so callers see
// context.DeadlineExceeded rather than a bare i/o timeout.
func ctxErrorOr(ctx context.Context, err error) error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxError(ctx)
	case <-t.C:
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
}

func parseID(raw json.RawMessage) (uint64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var id uint64
	if err := json.Unmarshal(raw, &id); err != nil {
		return 0, false
	}
	return id, true
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Version returns the QEMU version from the greeting.
func (c *Client) Version() (major, minor, micro int) {
	q := c.version.QEMU
	return q.Major, q.Minor, q.Micro
}

// Capabilities returns the capabilities QEMU offered in its greeting.
func (c *Client) Capabilities() []string {
	return append([]string(nil), c.capabilities...)
}

// Done is closed once the connection is gone, after Err has its reason.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (wrapping ErrDisconnected), or nil
// while it is up.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close closes the connection, failing waiting calls with ErrClosed, and
// waits for the reader to stop. It is safe to call more than once.
func (c *Client) Close() error {
	err := c.shutdown(ErrClosed)
	<-c.readerDone
	return err
}

// shutdown records why the connection ended and closes it, once. It returns
// the error from closing the socket for the first caller.
func (c *Client) shutdown(reason error) error {
	var err error
	c.closeOnce.Do(func() {
		c.err = reason
		err = c.conn.Close()
		close(c.done)
		if !errors.Is(reason, ErrClosed) {
			c.log.Info("QMP connection lost", "reason", reason.Error())
		}
	})
	return err
}

// readLoop is the only reader of the socket. It routes replies to waiting
// calls by id and events to subscribers, never blocking on either.
func (c *Client) readLoop(dec *json.Decoder) {
	defer close(c.readerDone)
	var err error
	for {
		var raw json.RawMessage
		if err = dec.Decode(&raw); err != nil {
			break
		}
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			c.log.V(1).Info("skipping undecodable QMP message", "error", err.Error())
			continue
		}
		if m.Event.Event != "" {
			c.publish(eventFrom(m.Event))
			continue
		}
		id, ok := parseID(m.ID)
		if !ok {
			c.log.V(1).Info("skipping QMP message without a usable id", "message", string(raw))
			continue
		}
		c.deliver(id, &m)
	}
	c.shutdown(connError(err))
	c.closeSubscribers()
}

func (c *Client) deliver(id uint64, m *message) {
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		// The caller's context ended before the reply came.
		c.log.V(1).Info("discarding late QMP reply", "id", id)
		return
	}
	ch <- m // buffered, one reply per id
}

// Execute runs a QMP command. args is marshalled as "arguments" (nil sends
// none); the "return" value is unmarshalled into out (nil ignores it). If ctx
// has no deadline the client timeout applies.
//
// Errors: a QMP error reply wraps *Error; a deadline wraps ErrTimeout and
// context.DeadlineExceeded; a cancelled ctx returns its cause; a lost
// connection wraps ErrDisconnected.
//
// When ctx ends first, Execute returns at once. QEMU may still run the
// command; its reply, if it ever comes, is recognised by id and discarded, so
// it cannot be mistaken for another command's reply and the connection stays
// usable. A QEMU that stops answering altogether shows up as timeouts on
// every call, not as a hung client.
func (c *Client) Execute(ctx context.Context, command string, args any, out any) error {
	return c.execute(ctx, command, args, nil, out)
}

// ExecuteWithFile is Execute passing f to QEMU with SCM_RIGHTS alongside the
// command, as getfd and add-fd expect. f stays open; QEMU gets its own copy.
func (c *Client) ExecuteWithFile(ctx context.Context, command string, args any, f *os.File, out any) error {
	if f == nil {
		return fmt.Errorf("qmp %s: nil file", command)
	}
	return c.execute(ctx, command, args, f, out)
}

func (c *Client) execute(ctx context.Context, command string, args any, f *os.File, out any) error {
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	if ctx.Err() != nil {
		return fmt.Errorf("qmp %s: %w", command, ctxError(ctx))
	}

	id := c.nextID.Add(1)
	b, err := json.Marshal(request{Command: goqmp.Command{Execute: command, Args: args}, ID: id})
	if err != nil {
		return fmt.Errorf("qmp %s: encoding arguments: %w", command, err)
	}
	b = append(b, '\n')

	ch := make(chan *message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	if err := c.write(ctx, b, f); err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case m := <-ch:
		return decodeReply(command, m, out)
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", command, ctxError(ctx))
	case <-c.done:
		// A reply that raced with the disconnect still counts.
		select {
		case m := <-ch:
			return decodeReply(command, m, out)
		default:
		}
		return fmt.Errorf("qmp %s: %w", command, c.err)
	}
}

func decodeReply(command string, m *message, out any) error {
	if m.Error != nil {
		e := *m.Error
		return fmt.Errorf("qmp %s: %w", command, &e)
	}
	if out == nil {
		return nil
	}
	if len(m.Return) == 0 {
		return fmt.Errorf("qmp %s: reply has no return value", command)
	}
	if err := json.Unmarshal(m.Return, out); err != nil {
		return fmt.Errorf("qmp %s: decoding reply: %w", command, err)
	}
	return nil
}

// write sends one command, with f's descriptor attached if f is not nil.
// A write cut short leaves half a command on the stream, so it ends the
// connection; a write that never started only fails this call.
func (c *Client) write(ctx context.Context, b []byte, f *os.File) error {
	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		return ctxError(ctx)
	case <-c.done:
		return c.err
	}
	defer func() { <-c.wlock }()
	// select picks at random among ready cases: recheck both.
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	if err := c.Err(); err != nil {
		return err
	}

	deadline, _ := ctx.Deadline()
	if err := c.conn.SetWriteDeadline(deadline); err != nil {
		return connError(err)
	}
	// Cancellation has no deadline of its own: interrupt the write instead,
	// but only while it is ours to interrupt.
	var mu sync.Mutex
	writing := true
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if writing {
			c.conn.SetWriteDeadline(aLongTimeAgo)
		}
	})
	n, err := c.writeMsg(b, f)
	mu.Lock()
	writing = false
	mu.Unlock()
	stop()

	switch {
	case err == nil:
		return nil
	case n == 0 && (ctx.Err() != nil || isDeadline(err)):
		return ctxErrorOr(ctx, err)
	default:
		err = connError(err)
		c.shutdown(err)
		return err
	}
}

func (c *Client) writeMsg(b []byte, f *os.File) (int, error) {
	if f == nil {
		return c.conn.Write(b)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("file descriptor of %s: %w", f.Name(), err)
	}
	var n int
	var werr error
	if err := rc.Control(func(fd uintptr) {
		n, _, werr = c.conn.WriteMsgUnix(b, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return 0, fmt.Errorf("file descriptor of %s: %w", f.Name(), err)
	}
	if werr != nil || n == len(b) {
		return n, werr
	}
	// sendmsg on a stream socket may send less; the descriptor went with the
	// first byte, the rest is plain data.
	m, err := c.conn.Write(b[n:])
	return n + m, err
}
