package localcluster

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

// spawner starts child processes from one goroutine locked to its OS thread. The children are started
// with PDEATHSIG=SIGKILL, which the kernel delivers when the thread that forked them ends: pinning that
// thread for the cluster's lifetime keeps them alive while the cluster runs and still kills them if the
// parent process dies without Stop (a test binary timing out, a crash).
type spawner struct {
	requests chan spawnRequest
	quit     chan struct{}
	once     sync.Once
}

type spawnRequest struct {
	cmd    *exec.Cmd
	result chan error
}

func newSpawner() *spawner {
	s := &spawner{requests: make(chan spawnRequest), quit: make(chan struct{})}
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

func (s *spawner) start(cmd *exec.Cmd) error {
	r := spawnRequest{cmd: cmd, result: make(chan error, 1)}
	select {
	case s.requests <- r:
		return <-r.result
	case <-s.quit:
		return errors.New("spawner stopped")
	}
}

func (s *spawner) stop() { s.once.Do(func() { close(s.quit) }) }

// process is one control-plane binary running in its own process group, its output in a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed after waitErr is set
	waitErr error
}

func startProcess(s *spawner, name, binary, logPath string, args []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== %s %s %q\n", time.Now().Format(time.RFC3339), binary, args)
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = s.start(cmd)
	// The child holds its own descriptor of the log file.
	logFile.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitError describes an unexpected exit, with the end of the log that usually says why.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited: %v; last log lines from %s:\n%s", p.name, p.waitErr, p.logPath, tail(p.logPath, 20))
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the exit.
func (p *process) stop(grace time.Duration) error {
	pgid := p.pid() // Setpgid makes the child the leader of a group with its own pid.
	if p.running() {
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stop %s: %w", p.name, err)
		}
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s: %w", p.name, err)
		}
		<-p.exited
	}
	// Anything the process left in its group goes too.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group of %s: %w", p.name, err)
	}
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
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
