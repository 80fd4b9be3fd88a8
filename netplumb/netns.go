package netplumb

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the network namespace at nsPath (for example
// /var/run/netns/NAME or /proc/PID/ns/net), then moves the thread back. fn runs on a goroutine
// of its own, so the caller's thread never changes namespace. Sockets and devices created by
// fn stay in the namespace; goroutines started by fn do not run in it.
//
// If the thread cannot be moved back it stays locked and the Go runtime destroys it when the
// goroutine ends, so no thread is ever left in the wrong namespace.
func Do(nsPath string, fn func() error) error {
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer target.Close()
	return doIn(target, fn)
}

type doResult struct {
	err      error
	panicked bool
	panicVal any
}

func doIn(target netns.NsHandle, fn func() error) error {
	done := make(chan doResult, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- doResult{err: fmt.Errorf("current network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			// setns failed, so the thread is still where it was.
			runtime.UnlockOSThread()
			done <- doResult{err: fmt.Errorf("enter network namespace: %w", err)}
			return
		}
		res := doResult{panicked: true}
		defer func() {
			if res.panicked {
				res.panicVal = recover()
			}
			if err := netns.Set(orig); err != nil {
				// Still locked: the runtime ends this thread with the goroutine.
				res.err = errors.Join(res.err, fmt.Errorf("leave network namespace: %w", err))
			} else {
				runtime.UnlockOSThread()
			}
			done <- res
		}()
		res.err = fn()
		res.panicked = false
	}()
	res := <-done
	if res.panicked {
		panic(res.panicVal)
	}
	return res.err
}

// nsConn is an open network namespace with a netlink handle whose socket lives in it.
type nsConn struct {
	path string
	ns   netns.NsHandle
	nl   *netlink.Handle
}

func openNS(path string) (*nsConn, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	c := &nsConn{path: path, ns: ns}
	// The handle's socket is created on a thread inside the namespace and stays bound to it.
	err = doIn(ns, func() error {
		var err error
		c.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink in %s: %w", path, err)
	}
	return c, nil
}

// Do runs fn inside the namespace (see the package-level Do).
func (c *nsConn) Do(fn func() error) error { return doIn(c.ns, fn) }

func (c *nsConn) Close() {
	c.nl.Close()
	c.ns.Close()
}
