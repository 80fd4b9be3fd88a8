// Package safepath opens paths that another party can write (a VM's directory shared with its
// launcher pod, a launcher's image volumes) without following symbolic links and without
// leaving the directory they are looked up in. Every lookup goes through openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS from a descriptor of the
// directory, and what is found is checked through the descriptor, never by its name again.
package safepath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Strict is the resolution of a path beneath an untrusted directory: no link of any kind is
// followed and no step leaves the directory.
const Strict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Reasons a path is refused, for errors.Is; the error itself says which path and why.
var (
	ErrSymlink  = errors.New("symbolic link refused")
	ErrEscape   = errors.New("path leads out of its directory")
	ErrNotDir   = errors.New("not a directory")
	ErrNotSock  = errors.New("not a socket")
	ErrOwner    = errors.New("unexpected owner")
	ErrNoOpenat = errors.New("openat2 unavailable")
)

// Openat2 is openat2(2) with O_CLOEXEC, retrying the races the kernel reports (a rename during
// the lookup), and saying what an old kernel lacks.
func Openat2(dir int, p string, flags uint64, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dir, p, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSYS):
			return -1, fmt.Errorf("%w: opening paths another party can write safely needs openat2 (Linux 5.6 or later): %w", ErrNoOpenat, err)
		}
		return -1, err
	}
	return -1, fmt.Errorf("%s: the lookup kept racing with renames: %w", p, unix.EAGAIN)
}

// FindLink says which leading part of rel, looked up in dir without following links, is a
// symbolic link, and where it points. ok is false when none is (any more).
func FindLink(dir int, rel string) (prefix, target string, ok bool) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		var st unix.Stat_t
		if unix.Fstatat(dir, prefix, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			continue
		}
		target := "?"
		buf := make([]byte, unix.PathMax)
		if n, err := unix.Readlinkat(dir, prefix, buf); err == nil {
			target = string(buf[:n])
		}
		return prefix, target, true
	}
	return "", "", false
}

// Dir is an open directory whose content another party controls.
type Dir struct {
	fd   int
	path string
}

// OpenDir opens rel beneath root. root is the caller's own (trusted, resolved as usual); rel
// is resolved strictly, so neither it nor any part of it may be a link or lead out of root.
func OpenDir(root, rel string) (*Dir, error) {
	p := filepath.Join(root, rel)
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	fd, err := Openat2(rootFD, rel, unix.O_PATH|unix.O_DIRECTORY, Strict)
	if err != nil {
		return nil, describe(rootFD, root, rel, err)
	}
	return &Dir{fd: fd, path: p}, nil
}

// Path is the directory's name, for messages.
func (d *Dir) Path() string { return d.path }

// Close releases the directory's descriptor.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// OpenSocket returns an O_PATH descriptor of the unix socket at rel beneath d, which must be
// reached without links, be a socket and be owned by uid.
func (d *Dir) OpenSocket(rel string, uid int) (*os.File, error) {
	fd, err := Openat2(d.fd, rel, unix.O_PATH, Strict)
	if err != nil {
		return nil, describe(d.fd, d.path, rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s in directory %s: %w", rel, d.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return nil, fmt.Errorf("%s in directory %s is %s, not a socket: %w", rel, d.path, kind(st.Mode), ErrNotSock)
	}
	if int(st.Uid) != uid {
		unix.Close(fd)
		return nil, fmt.Errorf("%s in directory %s is owned by uid %d, expected %d: %w", rel, d.path, st.Uid, uid, ErrOwner)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, rel)), nil
}

// DialUnix connects to the stream socket at rel beneath d (see OpenSocket). The connection
// goes through the checked descriptor's /proc/self/fd entry, so it reaches exactly the socket
// that was checked, whatever happens to the name meanwhile.
func (d *Dir) DialUnix(ctx context.Context, rel string, uid int) (*net.UnixConn, error) {
	f, err := d.OpenSocket(rel, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("%s in directory %s: %w", rel, d.path, err)
	}
	return c.(*net.UnixConn), nil
}

// ListenUnix listens on a new unix socket name directly in d, given to uid, replacing a socket
// already there. The socket is bound and chowned through d's descriptor, so a link put in its
// place is never followed, and the path stays short whatever d's own path.
func (d *Dir) ListenUnix(name string, uid int) (net.Listener, error) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return nil, fmt.Errorf("socket name %q is not a plain name", name)
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%s in directory %s: %w", name, d.path, err)
	}
	l, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.fd, name))
	if err != nil {
		return nil, fmt.Errorf("%s in directory %s: %w", name, d.path, err)
	}
	// Its path names d's descriptor, which is closed by then: the socket is left to go with d.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := unix.Fchownat(d.fd, name, uid, uid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("%s in directory %s: %w", name, d.path, err)
	}
	return l, nil
}

// DialUnix opens dir beneath root and connects to the socket sock in it, as Dir.DialUnix.
func DialUnix(ctx context.Context, root, dir, sock string, uid int) (*net.UnixConn, error) {
	d, err := OpenDir(root, dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DialUnix(ctx, sock, uid)
}

// describe turns an openat2 failure of rel beneath dir into an error naming the reason.
func describe(dirFD int, dir, rel string, err error) error {
	clean := path.Clean(rel)
	switch {
	case errors.Is(err, unix.ELOOP):
		if prefix, target, ok := FindLink(dirFD, clean); ok {
			if prefix == clean {
				return fmt.Errorf("%s in directory %s is a symbolic link (to %s); refusing to follow it: %w", rel, dir, target, ErrSymlink)
			}
			return fmt.Errorf("%s in directory %s: %s is a symbolic link (to %s); refusing to follow it: %w", rel, dir, prefix, target, ErrSymlink)
		}
		return fmt.Errorf("%s in directory %s: its path holds a symbolic link; refusing to follow it: %w", rel, dir, ErrSymlink)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%s leads out of directory %s; refused: %w", rel, dir, ErrEscape)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s in directory %s: %w", rel, dir, fs.ErrNotExist)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s in directory %s: a part of the path is not a directory: %w", rel, dir, ErrNotDir)
	}
	return fmt.Errorf("%s in directory %s: %w", rel, dir, err)
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("of file type %#o", mode&unix.S_IFMT)
}

// RemoveAll removes name, one element beneath root, with everything it holds. No link in it
// is followed: os.Root.RemoveAll walks the tree by descriptors, opening each directory with
// O_NOFOLLOW and unlinking entries relative to it, so a link (even one swapped in during the
// walk) is removed itself, never what it points to.
func RemoveAll(root, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q is not a single name in %s: %w", name, root, ErrEscape)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.RemoveAll(name)
}

// Refused reports whether err is a path refused for what it is (a link, an escape, the wrong
// type or owner), rather than missing or unreachable.
func Refused(err error) bool {
	for _, r := range []error{ErrSymlink, ErrEscape, ErrNotDir, ErrNotSock, ErrOwner} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}
