package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// quick bounds how long an operation that should return "at once" may take
// on a loaded 2-core machine.
const quick = 2 * time.Second

func TestExecuteArgumentsAndReturn(t *testing.T) {
	s := newFakeServer(t)
	got := make(chan fakeRequest, 2)
	s.handle("echo", func(fc *fakeConn, req fakeRequest) {
		got <- req
		fc.reply(req, req.Arguments)
	})
	c := s.dial(t)

	var out map[string]int
	if err := c.Execute(t.Context(), "echo", map[string]int{"a": 1}, &out); err != nil {
		t.Fatal(err)
	}
	if out["a"] != 1 {
		t.Errorf("return = %v, want a=1", out)
	}
	if req := <-got; string(req.Arguments) != `{"a":1}` {
		t.Errorf("arguments = %s", req.Arguments)
	}

	// nil args sends no "arguments"; nil out ignores the return value.
	if err := c.Execute(t.Context(), "echo", nil, nil); err != nil {
		t.Fatal(err)
	}
	if req := <-got; req.Arguments != nil {
		t.Errorf("arguments sent for nil args: %s", req.Arguments)
	}
	if maj, min, _ := c.Version(); maj != 7 || min != 2 {
		t.Errorf("version = %d.%d, want 7.2", maj, min)
	}
}

func TestErrorReplyIsTyped(t *testing.T) {
	s := newFakeServer(t)
	s.handle("device_del", func(fc *fakeConn, req fakeRequest) {
		fc.fail(req, ClassDeviceNotFound, "Device 'nic9' not found")
	})
	c := s.dial(t)

	err := c.DeviceDel(t.Context(), "nic9")
	var qe *Error
	if !errors.As(err, &qe) {
		t.Fatalf("error %v (%T) is not a *qmp.Error", err, err)
	}
	if qe.Class != ClassDeviceNotFound || qe.Desc != "Device 'nic9' not found" {
		t.Errorf("got class %q desc %q", qe.Class, qe.Desc)
	}
	if !HasClass(err, ClassDeviceNotFound) || HasClass(err, ClassGenericError) {
		t.Error("HasClass does not match the reply's class")
	}
	if errors.Is(err, ErrDisconnected) || errors.Is(err, ErrTimeout) {
		t.Errorf("error reply matches a transport sentinel: %v", err)
	}

	// The connection is still fine after an error reply.
	err = c.Execute(t.Context(), "no-such-command", nil, nil)
	if !HasClass(err, ClassCommandNotFound) {
		t.Errorf("unknown command: %v", err)
	}
}

func TestDisconnectFailsWaitersAtOnce(t *testing.T) {
	s := newFakeServer(t)
	var once sync.Once
	arrived := make(chan struct{})
	var mu sync.Mutex
	n := 0
	s.handle("hang", func(fc *fakeConn, req fakeRequest) {
		mu.Lock()
		n++
		if n == 5 {
			once.Do(func() { close(arrived) })
		}
		mu.Unlock()
	})
	c := s.dial(t)
	events, _ := c.Subscribe(4)

	errs := make(chan error, 5)
	for range 5 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs <- c.Execute(ctx, "hang", nil, nil)
		}()
	}
	<-arrived
	start := time.Now()
	s.close()

	for range 5 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrDisconnected) {
				t.Errorf("waiter got %v, want ErrDisconnected", err)
			}
			if errors.Is(err, ErrClosed) {
				t.Errorf("peer disconnect reported as ErrClosed: %v", err)
			}
		case <-time.After(quick):
			t.Fatal("waiter still blocked after disconnect")
		}
	}
	t.Logf("waiters failed %v after disconnect", time.Since(start))

	select {
	case <-c.Done():
	case <-time.After(quick):
		t.Fatal("Done not closed")
	}
	if err := c.Err(); !errors.Is(err, ErrDisconnected) {
		t.Errorf("Err() = %v", err)
	}
	if _, ok := <-events; ok {
		t.Error("subscription not closed on disconnect")
	}
	if err := c.Execute(t.Context(), "hang", nil, nil); !errors.Is(err, ErrDisconnected) {
		t.Errorf("call after disconnect: %v", err)
	}
}

func TestEventStormDoesNotDelayReplies(t *testing.T) {
	const storm = 20000
	s := newFakeServer(t)
	s.handle("slow", func(fc *fakeConn, req fakeRequest) {
		go func() {
			for i := range storm {
				fc.event("BLOCK_IO_ERROR", map[string]any{"n": i})
			}
			fc.reply(req, map[string]any{"ok": true})
		}()
	})
	s.reply("query-status", map[string]any{"status": "running", "running": true})
	c := s.dial(t)

	stuck, cancelStuck := c.Subscribe(1) // never read
	defer cancelStuck()
	all, cancelAll := c.Subscribe(storm)
	defer cancelAll()
	_ = stuck

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out struct{ OK bool }
	if err := c.Execute(ctx, "slow", nil, &out); err != nil {
		t.Fatalf("command during event storm: %v", err)
	}
	if !out.OK {
		t.Error("wrong reply")
	}
	// Events precede the reply on the wire, so all of them are queued now.
	if got := len(all); got != storm {
		t.Errorf("reading subscriber has %d events, want %d", got, storm)
	}
	for i := range storm {
		e := <-all
		if n, _ := e.Data["n"].(float64); int(n) != i || e.Name != "BLOCK_IO_ERROR" {
			t.Fatalf("event %d out of order: %+v", i, e)
		}
	}
	if d := c.Dropped(); d != storm-1 {
		t.Errorf("Dropped() = %d, want %d for the full subscriber", d, storm-1)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Errorf("command after storm: %v", err)
	}
}

func TestContextDeadline(t *testing.T) {
	s := newFakeServer(t)
	s.handle("never", func(*fakeConn, fakeRequest) {})
	s.reply("query-status", map[string]any{"status": "paused"})
	c := s.dial(t)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Execute(ctx, "never", nil, nil)
	if elapsed := time.Since(start); elapsed > quick {
		t.Errorf("returned after %v", elapsed)
	}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want ErrTimeout and context.DeadlineExceeded", err)
	}
	if errors.Is(err, ErrDisconnected) {
		t.Errorf("timeout closed the connection: %v", err)
	}
	if st, err := c.Status(t.Context()); err != nil || st.Status != StatusPaused {
		t.Errorf("client unusable after a timeout: %+v, %v", st, err)
	}
}

func TestContextCancel(t *testing.T) {
	s := newFakeServer(t)
	var sent atomic.Int32
	s.handle("never", func(*fakeConn, fakeRequest) { sent.Add(1) })
	s.reply("query-status", map[string]any{"status": "running", "running": true})
	c := s.dial(t)

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := c.Execute(ctx, "never", nil, nil)
	if elapsed := time.Since(start); elapsed > quick {
		t.Errorf("returned after %v", elapsed)
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want context.Canceled and not ErrTimeout", err)
	}

	// A context that already ended never sends the command.
	for range 20 {
		if err := c.Execute(ctx, "never", nil, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
	}
	// The server answers in order: once this reply is in, it has seen
	// everything sent before.
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("server received the command %d times, want 1", n)
	}
}

func TestDefaultTimeout(t *testing.T) {
	s := newFakeServer(t)
	s.handle("never", func(*fakeConn, fakeRequest) {})
	c := s.dial(t, WithTimeout(100*time.Millisecond))

	start := time.Now()
	err := c.Execute(context.Background(), "never", nil, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want ErrTimeout", err)
	}
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond || elapsed > quick {
		t.Errorf("default timeout took %v", elapsed)
	}
}

func TestLateReplyIsDiscarded(t *testing.T) {
	s := newFakeServer(t)
	late := make(chan struct{})
	s.handle("late", func(fc *fakeConn, req fakeRequest) {
		go func() {
			time.Sleep(200 * time.Millisecond)
			fc.reply(req, map[string]any{"status": "late"})
			close(late)
		}()
	})
	s.reply("query-status", map[string]any{"status": "running", "running": true})
	c := s.dial(t)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := c.Execute(ctx, "late", nil, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	for i := range 2 {
		if i == 1 {
			<-late
		}
		st, err := c.Status(t.Context())
		if err != nil || st.Status != StatusRunning {
			t.Errorf("status %d = %+v, %v: late reply leaked into another command", i, st, err)
		}
	}
}

func TestRepliesMatchedByID(t *testing.T) {
	s := newFakeServer(t)
	s.handle("delay", func(fc *fakeConn, req fakeRequest) {
		var args struct{ N int }
		json.Unmarshal(req.Arguments, &args)
		go func() {
			// Later commands answer first.
			time.Sleep(time.Duration(50-args.N) * time.Millisecond)
			fc.reply(req, args.N)
		}()
	})
	c := s.dial(t)

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			var got int
			if err := c.Execute(t.Context(), "delay", map[string]int{"n": i}, &got); err != nil {
				t.Error(err)
			} else if got != i {
				t.Errorf("command %d got reply %d", i, got)
			}
		})
	}
	wg.Wait()
}

func TestDialTimesOutWithoutGreeting(t *testing.T) {
	s := newFakeServer(t, func(s *fakeServer) { s.silent = true })

	start := time.Now()
	_, err := Dial(context.Background(), s.path, WithTimeout(100*time.Millisecond))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want ErrTimeout", err)
	}
	if elapsed := time.Since(start); elapsed > quick {
		t.Errorf("Dial took %v", elapsed)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := Dial(ctx, s.path); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestDialRetryWaitsForSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.sock")
	if _, err := Dial(t.Context(), path); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("without retry: %v, want ENOENT", err)
	}

	s := newFakeServer(t)
	time.AfterFunc(100*time.Millisecond, func() { os.Symlink(s.path, path) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, WithDialRetry(10*time.Millisecond))
	if err != nil {
		t.Fatalf("with retry: %v", err)
	}
	c.Close()
}

func TestEventDuringHandshake(t *testing.T) {
	s := newFakeServer(t, func(s *fakeServer) { s.eventBeforeCapsReply = true })
	s.reply("query-status", map[string]any{"status": "running", "running": true})
	c := s.dial(t)
	if st, err := c.Status(t.Context()); err != nil || st.Status != StatusRunning {
		t.Errorf("status = %+v, %v", st, err)
	}
}

func TestLargeReply(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	s := newFakeServer(t)
	s.reply("query-qmp-schema", big)
	c := s.dial(t)
	var got string
	if err := c.Execute(t.Context(), "query-qmp-schema", nil, &got); err != nil || len(got) != len(big) {
		t.Errorf("got %d bytes, %v", len(got), err)
	}
}

func TestExecuteWithFilePassesDescriptor(t *testing.T) {
	s := newFakeServer(t)
	received := make(chan string, 1)
	s.handle("getfd", func(fc *fakeConn, req fakeRequest) {
		if len(req.Files) != 1 {
			fc.fail(req, ClassGenericError, fmt.Sprintf("%d descriptors", len(req.Files)))
			return
		}
		defer req.Files[0].Close()
		b, _ := io.ReadAll(req.Files[0])
		received <- string(b)
		fc.reply(req, map[string]any{})
	})
	c := s.dial(t)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.WriteString("through the socket")
	w.Close()
	if err := c.GetFD(t.Context(), "fd0", r); err != nil {
		t.Fatal(err)
	}
	if got := <-received; got != "through the socket" {
		t.Errorf("server read %q from the descriptor", got)
	}
}

func TestEventFields(t *testing.T) {
	s := newFakeServer(t)
	s.handle("emit", func(fc *fakeConn, req fakeRequest) {
		fc.send(map[string]any{
			"event":     "STOP",
			"data":      map[string]any{"why": "test"},
			"timestamp": map[string]int64{"seconds": 1700000000, "microseconds": 250},
		})
		fc.reply(req, map[string]any{})
	})
	c := s.dial(t)
	events, cancel := c.Subscribe(8)
	defer cancel()
	if err := c.Execute(t.Context(), "emit", nil, nil); err != nil {
		t.Fatal(err)
	}
	e, err := WaitEvent(t.Context(), events, EventName("STOP"))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1700000000, 250000); !e.Timestamp.Equal(want) || e.Data["why"] != "test" {
		t.Errorf("event = %+v", e)
	}
}

func TestSubscribeCancelAndClose(t *testing.T) {
	s := newFakeServer(t)
	c := s.dial(t)

	events, cancel := c.Subscribe(0)
	cancel()
	cancel()
	if _, ok := <-events; ok {
		t.Error("cancelled subscription still open")
	}

	kept, _ := c.Subscribe(1)
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := <-kept; ok {
		t.Error("subscription open after Close")
	}
	if late, _ := c.Subscribe(1); late != nil {
		if _, ok := <-late; ok {
			t.Error("subscription after Close is open")
		}
	}
	<-c.Done()
	if err := c.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrDisconnected) {
		t.Errorf("Err() = %v", err)
	}
	if _, err := c.Status(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: %v", err)
	}
	if _, err := WaitEvent(t.Context(), kept, nil); !errors.Is(err, ErrDisconnected) {
		t.Errorf("WaitEvent on closed channel: %v", err)
	}
}
