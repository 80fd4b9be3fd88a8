package podrunner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces live, as with `ip netns`.
const netnsDir = "/run/netns"

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// createNetns creates the named network namespace, as `ip netns add NAME` does: a new namespace
// bind-mounted on /run/netns/NAME, so it outlives every process in it.
func createNetns(name string) (string, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return "", err
	}
	p := netnsPath(name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("create network namespace %s: %w", name, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, so nothing else runs in the namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		errc <- unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), p, "", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(p)
		return "", fmt.Errorf("create network namespace %s: %w", name, err)
	}
	return p, nil
}

// deleteNetns removes a named network namespace; a missing one is not an error. The namespace
// itself goes away with its last process.
func deleteNetns(name string) error {
	p := netnsPath(name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove network namespace %s: %w", name, err)
	}
	return nil
}

func netnsExists(name string) bool {
	_, err := os.Stat(netnsPath(name))
	return err == nil
}

// inNetns runs fn on an OS thread inside the network namespace at path. Processes fn starts are
// forked from that thread and so begin in the namespace. The thread is thrown away afterwards
// rather than moved back, so no goroutine can ever run in the wrong namespace.
func inNetns(path string, fn func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// netnsInode identifies a network namespace, to compare a process's (/proc/PID/ns/net) with a
// named one.
func netnsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
