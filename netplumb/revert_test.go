package netplumb

import (
	"errors"
	"reflect"
	"testing"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestReverter(t *testing.T) {
	var ran []string
	undo := func(name string, err error) func() error {
		return func() error { ran = append(ran, name); return err }
	}
	errUndo := errors.New("undo broke")
	errStep := errors.New("step broke")

	r := NewReverter(logr.Discard())
	r.Add("a", undo("a", nil))
	r.Add("b", undo("b", errUndo))
	r.Add("c", undo("c", nil))
	err := errStep
	r.Finish(&err)
	if !reflect.DeepEqual(ran, []string{"c", "b", "a"}) {
		t.Fatalf("undo order %v, want newest first and past a failure", ran)
	}
	if !errors.Is(err, errStep) || !errors.Is(err, errUndo) {
		t.Fatalf("Finish gave %v, want the step's and the undo's errors", err)
	}
	if err := r.Revert(); err != nil || len(ran) != 3 {
		t.Fatalf("undos ran twice: %v %v", ran, err)
	}

	ran = nil
	r.Add("d", undo("d", nil))
	var ok error
	r.Finish(&ok)
	if ok != nil || len(ran) != 0 {
		t.Fatalf("a successful setup was undone: %v %v", ran, ok)
	}
}

func TestRetryDump(t *testing.T) {
	calls := 0
	v, err := retryDump("things", func() (int, error) {
		calls++
		if calls < 3 {
			return 0, netlink.ErrDumpInterrupted
		}
		return 42, nil
	})
	if v != 42 || err != nil || calls != 3 {
		t.Fatalf("got %d, %v after %d calls", v, err, calls)
	}

	calls = 0
	_, err = retryDump("things", func() (int, error) { calls++; return 0, unix.EINTR })
	if !errors.Is(err, unix.EINTR) || calls != dumpAttempts {
		t.Fatalf("always interrupted: %v after %d calls", err, calls)
	}

	calls = 0
	_, err = retryDump("things", func() (int, error) { calls++; return 0, unix.EPERM })
	if !errors.Is(err, unix.EPERM) || calls != 1 {
		t.Fatalf("other error: %v after %d calls, want one call", err, calls)
	}
}
