package netplumb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func TestDoRunsInsideAndLeaksNoThread(t *testing.T) {
	path := newNetNS(t, "do")
	target, err := nsInode(path)
	if err != nil {
		t.Fatal(err)
	}
	host, err := nsInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Do(path, func() error {
				in, err := nsInode("/proc/thread-self/ns/net")
				if err == nil && in != target {
					err = fmt.Errorf("inside Do the thread is in namespace %d, want %d", in, target)
				}
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every thread of the process must be back in the host namespace.
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ino, err := nsInode(task)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if ino != host {
			t.Errorf("%s is in namespace %d, not the host's %d", task, ino, host)
		}
	}
}

func TestDoReturnsErrorsAndPanics(t *testing.T) {
	path := newNetNS(t, "doerr")
	sentinel := errors.New("boom")
	if err := Do(path, func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Do returned %v, want %v", err, sentinel)
	}
	if err := Do(filepath.Join(t.TempDir(), "missing"), func() error { return nil }); err == nil {
		t.Fatal("Do on a missing namespace succeeded")
	}
	func() {
		defer func() {
			if r := recover(); r != "inside" {
				t.Fatalf("recovered %v, want the panic from inside Do", r)
			}
		}()
		_ = Do(path, func() error { panic("inside") })
	}()
}
