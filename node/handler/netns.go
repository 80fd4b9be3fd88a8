package handler

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialInNetns opens a connection from inside another network namespace. A socket belongs to
// the namespace it was created in, so only the dial needs the switch; the thread is locked
// and restored so no other goroutine ever runs in the pod's namespace.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, derr := d.DialContext(ctx, network, addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread is stuck in the pod's namespace: never unlock it, so Go retires it.
			done <- result{c, derr}
			return
		}
		runtime.UnlockOSThread()
		done <- result{c, derr}
	}()
	r := <-done
	return r.c, r.err
}
