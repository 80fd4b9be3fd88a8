package vm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// SerialLogMax caps each file of the serial console's log: serial0.log holds the newest output
// and serial0.log.1 the SerialLogMax bytes before it, so a guest printing without end keeps at
// most twice this on the node. Readers wanting the history read .1, then the current file.
const SerialLogMax = 1 << 20

// The serial console's log is the launcher's, not QEMU's: QEMU's chardev logfile option opens
// a path once and writes to it for the VM's life (O_TRUNC, or O_APPEND with logappend), with no
// size limit and no reopen. So QEMU gets the write end of a pipe as that path (/dev/fd/N) and
// the launcher copies what comes out of it into a rotating file. Copy-and-truncate on QEMU's
// own file would lose whatever the guest prints between the copy and the truncate.

// rotatingLog is an append-only file that moves to path.1 (replacing the previous one) when
// it would grow past max, and starts again empty.
type rotatingLog struct {
	path string
	max  int64
	f    *os.File
	size int64
}

// openRotatingLog continues the log at path (a VM's earlier output stays, as with QEMU's
// logappend=on).
func openRotatingLog(path string, max int64) (*rotatingLog, error) {
	l := &rotatingLog{path: path, max: max}
	if err := l.reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

// Write appends p, rotating as often as needed so that no file passes max.
func (l *rotatingLog) Write(p []byte) (int, error) {
	if l.f == nil {
		// A rotation failed to open the new file: try again.
		if err := l.reopen(); err != nil {
			return 0, err
		}
	}
	written := 0
	for len(p) > 0 {
		if l.size >= l.max {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		chunk := p[:min(int64(len(p)), l.max-l.size)]
		n, err := l.f.Write(chunk)
		written += n
		l.size += int64(n)
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (l *rotatingLog) rotate() error {
	_ = l.f.Close()
	l.f = nil
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return l.reopen()
}

func (l *rotatingLog) reopen() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

func (l *rotatingLog) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// serialLogPipe is the pipe QEMU writes the serial console's log into, and the copy of it
// into the rotating file.
type serialLogPipe struct {
	// w is QEMU's end, passed as an inherited descriptor and closed here once QEMU holds it.
	w *os.File
	// done is closed when everything QEMU wrote is in the file (QEMU exited).
	done chan struct{}
}

// startSerialLog opens the rotating log at path and starts copying a new pipe into it.
func startSerialLog(path string, max int64, log logr.Logger) (*serialLogPipe, error) {
	out, err := openRotatingLog(path, max)
	if err != nil {
		return nil, fmt.Errorf("serial console log: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("serial console log: %w", err)
	}
	// Room for bursts while the copy catches up: a full pipe blocks QEMU's writer. The kernel
	// may refuse a size above fs.pipe-max-size; the default pipe then serves.
	_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	p := &serialLogPipe{w: w, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer r.Close()
		defer out.Close()
		copySerialLog(r, out, log)
	}()
	return p, nil
}

// copySerialLog moves everything from r to out until r ends. It never stops reading before
// r ends, even when out fails (a full disk): QEMU would block on a full pipe, with the guest's
// serial port behind it. What cannot be written is dropped, and the next output tried again.
func copySerialLog(r io.Reader, out io.Writer, log logr.Logger) {
	buf := make([]byte, 64<<10)
	failing := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, werr := out.Write(buf[:n])
			switch {
			case werr != nil && !failing:
				log.Error(werr, "writing the serial console log; dropping the guest's output until it works again")
				failing = true
			case werr == nil && failing:
				log.Info("writing the serial console log works again")
				failing = false
			}
		}
		if err != nil {
			return
		}
	}
}
