// Package vm runs one QEMU process for one VM: it starts QEMU paused, configures it over QMP,
// resumes it, and follows it until it exits, reporting why.
package vm

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/qmp"
)

var (
	// ErrAlreadyStarted is returned by Start on a VM that was started before.
	ErrAlreadyStarted = errors.New("vm: already started")
	// ErrNotRunning is returned by operations that need a live QEMU.
	ErrNotRunning = errors.New("vm: not running")
	// ErrInvalidSpec marks a start refused because the spec cannot be run.
	ErrInvalidSpec = errors.New("vm: invalid spec")
)

// Config is what a VM needs from its launcher besides the spec.
type Config struct {
	// Dir is the per-VM directory shared with the node agent (sockets, disks, logs).
	Dir string
	// EphemeralDir receives the containerDisk overlays; empty means Dir's disks/ (see
	// qemuargs.Layout).
	EphemeralDir string
	// QEMUBinary defaults to qemu-system-x86_64 from PATH.
	QEMUBinary string
	// Taps are tap devices opened by the caller, keyed by the interfaces' tap_fd_name.
	Taps map[string]*os.File
	// QuitTimeout bounds how long `quit` may take before QEMU is killed (default 5s).
	QuitTimeout time.Duration
	// DetachTimeout bounds the wait for the guest to release a hotplugged disk being
	// detached (default 60s).
	DetachTimeout time.Duration
	// SerialLogMax caps each of the serial console's two log files (default SerialLogMax).
	SerialLogMax int64
	// Sandbox shows whether QEMU can run under its seccomp filter (ProbeSandbox of QEMUBinary,
	// started by New when nil); the filter is on wherever it can be.
	Sandbox *SandboxProbe
	Log     logr.Logger
}

const defaultQEMU = "qemu-system-x86_64"

// VM is one QEMU process. Its life is not tied to any request context: only Shutdown, Kill or
// the guest end it.
type VM struct {
	cfg    Config
	layout qemuargs.Layout
	log    logr.Logger

	mu        sync.Mutex
	spec      *launcherapi.VMSpec
	started   bool
	status    launcherapi.StatusResponse
	cmd       *exec.Cmd
	mon       *qmp.Client
	exited    chan struct{}
	exitErr   error
	subs      map[chan *launcherapi.Event]struct{}
	stopping  stopIntent
	killMsg   string
	lastShutd *qmp.Event
	// rebootPending turns the next guest power-off into a reset (soft reboot).
	rebootPending bool
	// poweredOff is set from the guest's power-off until QEMU resumes it (or exits).
	poweredOff bool
	// eventsDone is closed when the QMP event stream has ended.
	eventsDone   chan struct{}
	shutdownOnce sync.Once
	timings      []PhaseTiming
	// serialLog copies the serial console's log out of QEMU; nil without a serial console.
	serialLog *serialLogPipe
	// hp is the disks attached while the VM runs; hotplugNodes maps their format nodes to
	// their names, for the block statistics.
	hp           hotplugState
	hotplugNodes map[string]string
	// dumping is set while QEMU dumps the guest's memory (status.MemoryDump is active);
	// dumpSeq numbers the dumps.
	dumping bool
	dumpSeq int
}

// stopIntent records who asked QEMU to stop, so the exit can be reported with the right reason.
type stopIntent int

const (
	intentNone stopIntent = iota
	intentShutdown
	intentKill
	// intentMigrated: the guest runs on the migration target; this QEMU quits.
	intentMigrated
)

// New returns a VM that has not started yet.
func New(cfg Config) *VM {
	if cfg.QEMUBinary == "" {
		cfg.QEMUBinary = defaultQEMU
	}
	if cfg.QuitTimeout == 0 {
		cfg.QuitTimeout = 5 * time.Second
	}
	if cfg.DetachTimeout == 0 {
		cfg.DetachTimeout = defaultDetachTimeout
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	l := qemuargs.NewLayout(cfg.Dir)
	l.Binary = cfg.QEMUBinary
	l.EphemeralDir = cfg.EphemeralDir
	if cfg.Sandbox == nil {
		cfg.Sandbox = ProbeSandbox(cfg.QEMUBinary)
	}
	return &VM{
		cfg:        cfg,
		layout:     l,
		log:        cfg.Log,
		exited:     make(chan struct{}),
		eventsDone: make(chan struct{}),
		subs:       map[chan *launcherapi.Event]struct{}{},
		status:     launcherapi.StatusResponse{State: launcherapi.State_STATE_PENDING},
	}
}

// Layout is where this VM keeps its sockets and disks.
func (v *VM) Layout() qemuargs.Layout { return v.layout }

// Spec returns the spec the VM was started with, or nil.
func (v *VM) Spec() *launcherapi.VMSpec {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.spec == nil {
		return nil
	}
	return proto.Clone(v.spec).(*launcherapi.VMSpec)
}

// Status is a snapshot of the VM's state.
func (v *VM) Status() *launcherapi.StatusResponse {
	v.mu.Lock()
	defer v.mu.Unlock()
	return proto.Clone(&v.status).(*launcherapi.StatusResponse)
}

// Exited is closed once QEMU has exited (or failed to start) and the reason is recorded.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// Subscribe returns lifecycle events, starting with the current state. A subscriber that does
// not keep up loses events rather than slowing the VM; the final event is always delivered
// when there is room, and the channel is closed after QEMU exits.
func (v *VM) Subscribe() (<-chan *launcherapi.Event, func()) {
	ch := make(chan *launcherapi.Event, 64)
	v.mu.Lock()
	ch <- v.eventLocked("")
	select {
	case <-v.exited:
		close(ch)
		v.mu.Unlock()
		return ch, func() {}
	default:
	}
	v.subs[ch] = struct{}{}
	v.mu.Unlock()
	return ch, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if _, ok := v.subs[ch]; ok {
			delete(v.subs, ch)
			close(ch)
		}
	}
}

func (v *VM) eventLocked(qmpEvent string) *launcherapi.Event {
	return &launcherapi.Event{
		UnixNano:   time.Now().UnixNano(),
		State:      v.status.State,
		ExitReason: v.status.ExitReason,
		Message:    v.status.Message,
		QmpEvent:   qmpEvent,
	}
}

// setState changes the state and tells subscribers; it is a no-op once QEMU has exited, so a
// late QMP event cannot resurrect a stopped VM.
func (v *VM) setState(s launcherapi.State, qmpEvent string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if isFinal(v.status.State) || v.status.State == s {
		return
	}
	v.status.State = s
	v.publishLocked(qmpEvent)
}

func (v *VM) publishLocked(qmpEvent string) {
	ev := v.eventLocked(qmpEvent)
	for ch := range v.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func isFinal(s launcherapi.State) bool {
	return s == launcherapi.State_STATE_STOPPED || s == launcherapi.State_STATE_CRASHED
}
