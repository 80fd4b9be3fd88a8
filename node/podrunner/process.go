package podrunner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shimScript runs the launcher as a child of a small shell in a session of its own. The shell
// outlives the runner, waits for the launcher, and records its exit status, so a runner started
// later can report how a launcher that ended while no runner was watching ended.
//
// $1 log file, $2 pid file, $3 exit file, then the launcher's argv.
const shimScript = `log=$1 pidf=$2 exitf=$3
shift 3
"$@" </dev/null >>"$log" 2>&1 &
pid=$!
echo "$pid" >"$pidf.tmp" && mv "$pidf.tmp" "$pidf"
wait "$pid"
echo "$?" >"$exitf.tmp" && mv "$exitf.tmp" "$exitf"
`

// launch is what starting one launcher needs.
type launch struct {
	Argv     []string
	Env      []string
	Dir      string // working directory
	Netns    string // path of the network namespace to start in
	LogFile  string
	PidFile  string
	ExitFile string
}

// procRef names one process across restarts: a pid alone could have been reused.
type procRef struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"` // start time in clock ticks after boot (/proc/PID/stat field 22)
}

// alive reports whether the process still exists and is the same one.
func (p procRef) alive() bool {
	if p.Pid <= 0 {
		return false
	}
	st, err := readStat(p.Pid)
	return err == nil && st.start == p.Start && st.state != 'Z'
}

// startShim starts the shim and returns it and the launcher once the launcher's pid is known.
// No parent-death signal is set: the launcher must survive the runner.
func startShim(l launch) (shim, launcher procRef, err error) {
	for _, f := range []string{l.PidFile, l.ExitFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return shim, launcher, err
		}
	}
	args := append([]string{"-c", shimScript, "qvirt-shim", l.LogFile, l.PidFile, l.ExitFile}, l.Argv...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = l.Env
	cmd.Dir = l.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := inNetns(l.Netns, cmd.Start); err != nil {
		return shim, launcher, fmt.Errorf("start shim: %w", err)
	}
	// Reap the shim when it ends while this process lives; after a restart init does.
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	shim = procRef{Pid: cmd.Process.Pid}
	if st, err := readStat(shim.Pid); err == nil {
		shim.Start = st.start
	}

	deadline := time.After(10 * time.Second)
	for {
		b, err := os.ReadFile(l.PidFile)
		if err == nil {
			pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
			if perr != nil || pid <= 0 {
				return shim, launcher, fmt.Errorf("shim wrote a bad pid %q", b)
			}
			launcher = procRef{Pid: pid}
			// The launcher may already be gone (a failed exec): its start time stays 0 and the
			// exit file tells why.
			if st, err := readStat(pid); err == nil && st.session == shim.Pid {
				launcher.Start = st.start
			}
			return shim, launcher, nil
		}
		select {
		case <-exited:
			if _, err := os.Stat(l.PidFile); err == nil {
				continue
			}
			return shim, launcher, fmt.Errorf("shim exited before starting the launcher: %v", cmd.ProcessState)
		case <-deadline:
			killSession(shim.Pid)
			return shim, launcher, errors.New("shim did not start the launcher within 10s")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readExit returns the launcher's exit status as the shim recorded it.
func readExit(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

// watcher reports when one process ends. A pidfd pins the process, so a reused pid cannot fool
// it; signals go through the pidfd for the same reason.
type watcher struct {
	ref  procRef
	done chan struct{}

	mu     sync.Mutex
	fd     int // -1 once closed
	closed bool
	stop   chan struct{}
}

func watch(ref procRef) *watcher {
	w := &watcher{ref: ref, done: make(chan struct{}), fd: -1, stop: make(chan struct{})}
	fd, err := unix.PidfdOpen(ref.Pid, 0)
	// The start time is checked after opening, so the descriptor is known to name our process.
	if err != nil || ref.Start == 0 || !ref.alive() {
		if err == nil {
			unix.Close(fd)
		}
		close(w.done)
		return w
	}
	w.fd = fd
	go w.wait()
	return w
}

func (w *watcher) wait() {
	defer w.close()
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		n, err := unix.Poll(fds, 1000)
		if err != nil && !errors.Is(err, unix.EINTR) {
			// Cannot poll: fall back to /proc.
			for w.ref.alive() {
				select {
				case <-w.stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
			close(w.done)
			return
		}
		if n > 0 {
			close(w.done)
			return
		}
	}
}

func (w *watcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// release stops watching without touching the process (the runner is shutting down).
func (w *watcher) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
}

func (w *watcher) signal(sig unix.Signal) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil // already gone
	}
	if err := unix.PidfdSendSignal(w.fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, w.ref.Pid, err)
	}
	return nil
}

// killSession SIGKILLs every process in the session sid (the shim's) and waits up to 5 s for
// them to be gone; it returns the pids that would not go. QEMU has a process group of its own
// but stays in the session, so a launcher that died without stopping it leaves nothing behind.
func killSession(sid int) []int {
	if sid <= 1 {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := sessionMembers(sid)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionMembers lists the live (not zombie) processes of session sid.
func sessionMembers(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil && st.session == sid && st.state != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

type procStat struct {
	state   byte
	session int
	start   uint64
}

// readStat parses /proc/PID/stat; the command name may hold spaces and parentheses, so fields
// are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("pid %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): session is field 6, starttime field 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("pid %d: short stat", pid)
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return procStat{}, err
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, err
	}
	return procStat{state: f[0][0], session: sid, start: start}, nil
}
