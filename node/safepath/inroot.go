package safepath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// InRoot resolves a path inside a container's root (/proc/<pid>/root) as the container would:
// symbolic links are followed, but an absolute one or a ".." resolves against that root, never
// the caller's, and no magic link (/proc/self/...) is followed.
const InRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// ErrTooLarge is a file longer than its reader accepts.
var ErrTooLarge = errors.New("file too large")

// ReadFileInRoot reads the regular file rel inside root (a directory another party controls,
// such as a container's root) resolved with InRoot. It reads at most limit bytes and reports
// ErrTooLarge, with what it read, when the file holds more. A FIFO or device there neither
// blocks nor is read.
func ReadFileInRoot(root, rel string, limit int) ([]byte, error) {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	fd, err := Openat2(rootFD, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, InRoot)
	if err != nil {
		return nil, describe(rootFD, root, rel, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(root, rel))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", rel, root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s in %s is %s, not a regular file", rel, root, kind(st.Mode))
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", rel, root, err)
	}
	if len(b) > limit {
		return b[:limit], fmt.Errorf("%s in %s is over %d bytes: %w", rel, root, limit, ErrTooLarge)
	}
	return b, nil
}
