package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/qvirt/qvirt/launcher/accesscred"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/disks"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/qmp"
)

// phase is one named step of VM start; a failed phase stops the start and nothing later runs.
type phase struct {
	name string
	run  func(ctx context.Context) error
}

// PhaseTiming is how long one start phase took.
type PhaseTiming struct {
	Name string
	Took time.Duration
}

// StartTimings returns the durations of the start phases completed so far, in order.
func (v *VM) StartTimings() []PhaseTiming {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]PhaseTiming(nil), v.timings...)
}

// balloonPath is the QOM path of the memballoon device built by qemuargs.
const balloonPath = "/machine/peripheral/balloon0"

// Start boots the VM: validate, prepare the directory and disks, start QEMU paused, connect QMP,
// configure, then resume. ctx bounds the start only; the VM outlives it.
func (v *VM) Start(ctx context.Context, spec *launcherapi.VMSpec) error {
	return v.start(ctx, spec, false)
}

// StartIncoming starts QEMU for spec as a migration target: with the same command line, and
// -incoming, it listens on MigrationSocket for the source's state and runs the guest once the
// migration completes (see MigrateIncoming's events in followEvents).
func (v *VM) StartIncoming(ctx context.Context, spec *launcherapi.VMSpec) error {
	return v.start(ctx, spec, true)
}

func (v *VM) start(ctx context.Context, spec *launcherapi.VMSpec, incoming bool) error {
	v.mu.Lock()
	if v.started {
		v.mu.Unlock()
		return ErrAlreadyStarted
	}
	v.started = true
	v.spec = proto.Clone(spec).(*launcherapi.VMSpec)
	v.status.State = launcherapi.State_STATE_STARTING
	v.publishLocked("")
	v.mu.Unlock()

	var argv []string
	var taps []*os.File
	phases := []phase{
		{"validate", func(ctx context.Context) error {
			var err error
			v.layout.TapFDs, taps = assignTapFDs(v.cfg.Taps)
			v.layout.Sandbox = v.awaitSandbox(ctx)
			if spec.GetDevices().GetSerialConsole() {
				// The descriptor after the taps: QEMU writes the console's log into it.
				v.layout.SerialLogFD = 3 + len(taps)
			}
			if argv, err = qemuargs.Build(spec, v.layout); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
			}
			if incoming {
				// Listening starts over QMP, once the capabilities match the source's.
				argv = append(argv, "-incoming", "defer")
			}
			return nil
		}},
		{"prepare-dir", v.prepareDir},
		{"prepare-disks", func(ctx context.Context) error {
			seeded, err := accesscred.WithSeedKeys(spec)
			if err != nil {
				return err
			}
			return disks.Prepare(ctx, seeded, v.layout, v.log)
		}},
		{"start-qemu", func(context.Context) error { return v.startQEMU(argv, taps) }},
		{"connect-qmp", v.connectQMP},
		{"configure", v.configure},
		{"cont", func(ctx context.Context) error {
			if incoming {
				return v.listenIncoming(ctx)
			}
			if spec.StartPaused {
				return nil
			}
			return v.monitor().Cont(ctx)
		}},
	}
	for _, p := range phases {
		t0 := time.Now()
		if err := p.run(ctx); err != nil {
			err = fmt.Errorf("start phase %s: %w", p.name, err)
			v.failStart(err)
			return err
		}
		took := time.Since(t0)
		v.mu.Lock()
		v.timings = append(v.timings, PhaseTiming{Name: p.name, Took: took})
		v.mu.Unlock()
		v.log.V(1).Info("start phase done", "phase", p.name, "took", took)
	}
	v.mu.Lock()
	v.status.StartedUnixNano = time.Now().UnixNano()
	v.mu.Unlock()
	if spec.GetDevices().GetGuestAgent() {
		go v.followGuestAgent()
	}
	if incoming {
		v.setState(launcherapi.State_STATE_MIGRATING_IN, "")
		v.log.Info("VM waiting for its migration", "pid", v.Status().QemuPid, "socket", v.layout.MigrationSocket())
		return nil
	}
	if spec.StartPaused {
		v.setState(launcherapi.State_STATE_PAUSED, "")
		v.log.Info("VM started paused", "pid", v.Status().QemuPid)
		return nil
	}
	v.setState(launcherapi.State_STATE_RUNNING, "")
	v.log.Info("VM running", "pid", v.Status().QemuPid)
	return nil
}

// assignTapFDs gives every tap a descriptor number in QEMU: ExtraFiles start at fd 3, in the
// sorted order of their names so the command line is deterministic.
func assignTapFDs(taps map[string]*os.File) (map[string]int, []*os.File) {
	names := make([]string, 0, len(taps))
	for n := range taps {
		names = append(names, n)
	}
	sort.Strings(names)
	fds := make(map[string]int, len(names))
	files := make([]*os.File, 0, len(names))
	for i, n := range names {
		fds[n] = 3 + i
		files = append(files, taps[n])
	}
	return fds, files
}

func (v *VM) prepareDir(context.Context) error {
	if err := os.MkdirAll(v.layout.Dir, 0o750); err != nil {
		return err
	}
	// Sockets left by an earlier QEMU would make the new one fail to listen.
	for _, p := range []string{v.layout.QMPSocket(), v.layout.SerialSocket(), v.layout.VNCSocket(), v.layout.MigrationSocket(), v.layout.MigrationDisksSocket()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (v *VM) startQEMU(argv []string, taps []*os.File) error {
	logf, err := os.OpenFile(v.qemuLogPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	defer logf.Close() // QEMU holds its own copy.
	extra := taps
	if v.layout.SerialLogFD != 0 {
		if want := 3 + len(taps); v.layout.SerialLogFD != want {
			return fmt.Errorf("serial console log: descriptor %d in the command line, but QEMU gets it as %d", v.layout.SerialLogFD, want)
		}
		max := v.cfg.SerialLogMax
		if max <= 0 {
			max = SerialLogMax
		}
		sl, err := startSerialLog(v.layout.SerialLog(), max, v.log)
		if err != nil {
			return err
		}
		// QEMU holds its own copy; once it exits, the copy into the file ends.
		defer sl.w.Close()
		extra = append(append([]*os.File(nil), taps...), sl.w)
		v.mu.Lock()
		v.serialLog = sl
		v.mu.Unlock()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = v.layout.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	// Own process group: a signal meant for the launcher's terminal does not reach QEMU, and
	// QEMU dies with the launcher rather than running unmanaged.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	v.mu.Lock()
	v.cmd = cmd
	v.status.QemuPid = int64(cmd.Process.Pid)
	v.mu.Unlock()
	go v.watch(cmd)
	return nil
}

func (v *VM) connectQMP(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type result struct {
		c   *qmp.Client
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := qmp.Dial(dctx, v.layout.QMPSocket(), qmp.WithDialRetry(20*time.Millisecond), qmp.WithLogger(v.log))
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return r.err
		}
		v.mu.Lock()
		v.mon = r.c
		v.mu.Unlock()
		events, _ := r.c.Subscribe(256)
		go v.followEvents(events)
		return nil
	case <-v.exited:
		cancel()
		return fmt.Errorf("qemu exited before QMP was ready: %s", v.Status().Message)
	}
}

// configure runs the QMP hooks that must happen before the guest runs its first instruction.
func (v *VM) configure(ctx context.Context) error {
	if v.spec.GetDevices().GetMemBalloon() {
		// The balloon driver only reports guest memory statistics when polled.
		if err := v.monitor().SetBalloonStatsPollingInterval(ctx, balloonPath, 5*time.Second); err != nil {
			return fmt.Errorf("balloon statistics: %w", err)
		}
	}
	return nil
}

// failStart ends a start that did not complete: QEMU (if any) is killed so no half-configured
// guest ever runs, and the status records why.
func (v *VM) failStart(err error) {
	v.log.Error(err, "VM start failed")
	v.mu.Lock()
	cmd := v.cmd
	v.stopping = intentKill
	v.status.ExitReason = launcherapi.ExitReason_EXIT_REASON_FAILED_START
	v.status.Message = err.Error()
	v.mu.Unlock()
	if cmd == nil {
		v.finish(launcherapi.State_STATE_CRASHED, launcherapi.ExitReason_EXIT_REASON_FAILED_START, err.Error())
		return
	}
	_ = cmd.Process.Kill()
	<-v.exited
}

func (v *VM) monitor() *qmp.Client {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mon
}
