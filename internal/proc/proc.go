// Package proc starts the long-running child processes of local mode and tests: each in its own
// process group with its output in a log file, and killed by the kernel if the parent dies.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Spawner starts child processes from one goroutine locked to its OS thread. The children are started
// with PDEATHSIG=SIGKILL, which the kernel delivers when the thread that forked them ends: pinning that
// thread for the cluster's lifetime keeps them alive while the cluster runs and still kills them if the
// parent process dies without Stop (a test binary timing out, a crash).
type Spawner struct {
	requests chan spawnRequest
	quit     chan struct{}
	once     sync.Once
}

type spawnRequest struct {
	cmd    *exec.Cmd
	result chan error
}

// NewSpawner pins a goroutine to an OS thread for the children's lifetime.
func NewSpawner() *Spawner {
	s := &Spawner{requests: make(chan spawnRequest), quit: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(ready)
		for {
			select {
			case r := <-s.requests:
				r.result <- r.cmd.Start()
			case <-s.quit:
				runtime.UnlockOSThread()
				return
			}
		}
	}()
	<-ready
	return s
}

// Start starts cmd from the pinned thread.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	r := spawnRequest{cmd: cmd, result: make(chan error, 1)}
	select {
	case s.requests <- r:
		return <-r.result
	case <-s.quit:
		return errors.New("spawner stopped")
	}
}

// Stop releases the pinned thread; children started later get no parent-death signal.
func (s *Spawner) Stop() { s.once.Do(func() { close(s.quit) }) }

// Process is one control-plane binary running in its own process group, its output in a log file.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed after waitErr is set
	waitErr error
}

// StartProcess runs binary with args, appending its output to logPath.
func StartProcess(s *Spawner, name, binary, logPath string, args []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== %s %s %q\n", time.Now().Format(time.RFC3339), binary, args)
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = s.Start(cmd)
	// The child holds its own descriptor of the log file.
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id, also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ExitError describes an unexpected exit, with the end of the log that usually says why.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited: %v; last log lines from %s:\n%s", p.Name, p.waitErr, p.LogPath, Tail(p.LogPath, 20))
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) error {
	pgid := p.Pid() // Setpgid makes the child the leader of a group with its own pid.
	if p.Running() {
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stop %s: %w", p.Name, err)
		}
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s: %w", p.Name, err)
		}
		<-p.exited
	}
	// Anything the process left in its group goes too.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group of %s: %w", p.Name, err)
	}
	return nil
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Kill sends SIGKILL to the process alone (not its group), as a crash would end it.
func (p *Process) Kill() error { return p.cmd.Process.Kill() }
