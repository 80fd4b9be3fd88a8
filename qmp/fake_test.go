package qmp

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeServer is a scripted QMP server on a unix socket: it greets, accepts
// qmp_capabilities and hands every other command to a handler by name.
// Unknown commands get a CommandNotFound error, as from QEMU.
type fakeServer struct {
	t    testing.TB
	path string
	ln   *net.UnixListener

	// Set by newFakeServer's setup functions, before accepting.
	silent  bool   // accept but never greet
	version [3]int // QEMU version in the greeting
	// eventBeforeCapsReply sends an event between qmp_capabilities and its
	// reply, as QEMU may.
	eventBeforeCapsReply bool

	mu       sync.Mutex
	conns    []*fakeConn
	handlers map[string]func(*fakeConn, fakeRequest)
}

type fakeRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
	// Files came with the command through SCM_RIGHTS.
	Files []*os.File `json:"-"`
}

type fakeConn struct {
	conn *net.UnixConn
	mu   sync.Mutex
}

func newFakeServer(t testing.TB, setup ...func(*fakeServer)) *fakeServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{
		t:        t,
		path:     path,
		ln:       ln,
		handlers: map[string]func(*fakeConn, fakeRequest){},
		version:  [3]int{7, 2, 0},
	}
	for _, f := range setup {
		f(s)
	}
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) handle(command string, h func(*fakeConn, fakeRequest)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[command] = h
}

// reply registers a handler answering command with ret.
func (s *fakeServer) reply(command string, ret any) {
	s.handle(command, func(fc *fakeConn, req fakeRequest) { fc.reply(req, ret) })
}

func (s *fakeServer) dial(t testing.TB, opts ...Option) *Client {
	t.Helper()
	ctx := t.Context()
	c, err := Dial(ctx, s.path, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *fakeServer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fc := range s.conns {
		fc.conn.Close()
	}
}

func (s *fakeServer) accept() {
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		fc := &fakeConn{conn: conn}
		s.mu.Lock()
		s.conns = append(s.conns, fc)
		s.mu.Unlock()
		go s.serve(fc)
	}
}

func (s *fakeServer) serve(fc *fakeConn) {
	if s.silent {
		return
	}
	fc.send(map[string]any{"QMP": map[string]any{
		"version": map[string]any{
			"qemu":    map[string]int{"major": s.version[0], "minor": s.version[1], "micro": s.version[2]},
			"package": "fake",
		},
		"capabilities": []string{"oob"},
	}})
	var pending []byte
	buf := make([]byte, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(16*4))
	for {
		n, oobn, _, _, err := fc.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		files := parseRights(s.t, oob[:oobn])
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			line := pending[:i]
			pending = pending[i+1:]
			var req fakeRequest
			if err := json.Unmarshal(line, &req); err != nil {
				s.t.Errorf("fake server: bad command %q: %v", line, err)
				return
			}
			// Descriptors arrive with the first byte of the message that
			// carried them.
			req.Files, files = files, nil
			s.dispatch(fc, req)
		}
	}
}

func (s *fakeServer) dispatch(fc *fakeConn, req fakeRequest) {
	if req.Execute == "qmp_capabilities" {
		if s.eventBeforeCapsReply {
			fc.event("RTC_CHANGE", map[string]any{"offset": 1})
		}
		fc.reply(req, map[string]any{})
		return
	}
	s.mu.Lock()
	h, ok := s.handlers[req.Execute]
	s.mu.Unlock()
	if !ok {
		fc.fail(req, ClassCommandNotFound, "The command "+req.Execute+" has not been found")
		return
	}
	h(fc, req)
}

func parseRights(t testing.TB, oob []byte) []*os.File {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		t.Errorf("fake server: control message: %v", err)
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			t.Errorf("fake server: unix rights: %v", err)
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files
}

func (fc *fakeConn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.conn.Write(append(b, '\r', '\n'))
}

func (fc *fakeConn) reply(req fakeRequest, ret any) {
	fc.send(map[string]any{"return": ret, "id": req.ID})
}

func (fc *fakeConn) fail(req fakeRequest, class, desc string) {
	fc.send(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": req.ID})
}

func (fc *fakeConn) event(name string, data map[string]any) {
	now := time.Now()
	fc.send(map[string]any{
		"event":     name,
		"data":      data,
		"timestamp": map[string]int64{"seconds": now.Unix(), "microseconds": int64(now.Nanosecond() / 1000)},
	})
}

func (fc *fakeConn) close() { fc.conn.Close() }
