// Package server exposes one VM over the launcher's gRPC API on a unix socket in the per-VM
// directory, and receives the tap descriptors the node agent hands over.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/fdpass"
	"github.com/qvirt/qvirt/launcher/vm"
	"github.com/qvirt/qvirt/qmp"
)

// Socket and fd-socket names inside the per-VM directory.
const (
	SocketName   = "launcher.sock"
	FDSocketName = "fds.sock"
)

// startTimeout bounds one VM start; the start is not tied to the Sync request's context.
const startTimeout = 3 * time.Minute

// Options configure a Server.
type Options struct {
	Dir string
	// EphemeralDir receives the containerDisk overlays; empty means Dir's disks/.
	EphemeralDir string
	QEMUBinary   string
	Log          logr.Logger
}

// Server serves the Launcher gRPC service for the single VM of this launcher.
type Server struct {
	launcherapi.UnimplementedLauncherServer
	opts Options

	mu      sync.Mutex
	vm      *vm.VM
	taps    map[string]*os.File
	created chan struct{}
	sandbox *vm.SandboxProbe
}

// New returns a Server whose VM is created by the first Sync.
func New(opts Options) *Server {
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	// Whether QEMU can run under its seccomp filter is learnt while the launcher waits for its
	// spec, so the VM's start does not wait for it.
	return &Server{opts: opts, taps: map[string]*os.File{}, created: make(chan struct{}), sandbox: vm.ProbeSandbox(opts.QEMUBinary)}
}

// VMCreated is closed once Sync has created the VM.
func (s *Server) VMCreated() <-chan struct{} { return s.created }

// VM returns the VM, or nil before the first Sync.
func (s *Server) VM() *vm.VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vm
}

// AddTap keeps a descriptor handed in: a tap (or the vhost-vsock device) for the VM's start,
// a hotplugged disk's, a memory dump's. A newer one under the same name wins.
func (s *Server) AddTap(name string, f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.taps[name]; old != nil {
		old.Close()
	}
	s.taps[name] = f
	s.opts.Log.V(1).Info("descriptor received", "name", name)
}

// ServeFDs accepts connections that hand over tap descriptors until l is closed.
func (s *Server) ServeFDs(l *net.UnixListener) error {
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer conn.Close()
			for {
				name, f, err := fdpass.Receive(conn)
				if err != nil {
					return
				}
				s.AddTap(name, f)
			}
		}()
	}
}

// Sync starts the VM, or reports on it if it was started with the same spec.
func (s *Server) Sync(ctx context.Context, req *launcherapi.SyncRequest) (*launcherapi.StatusResponse, error) {
	return s.sync(ctx, req, (*vm.VM).Start)
}

// sync creates the VM on the first call and starts it with start; later calls with the same
// spec report on it.
func (s *Server) sync(ctx context.Context, req *launcherapi.SyncRequest, start func(*vm.VM, context.Context, *launcherapi.VMSpec) error) (*launcherapi.StatusResponse, error) {
	if req.GetSpec() == nil {
		return nil, status.Error(codes.InvalidArgument, "spec: required")
	}
	s.mu.Lock()
	if v := s.vm; v != nil {
		s.mu.Unlock()
		if !proto.Equal(v.Spec(), req.Spec) {
			return nil, status.Error(codes.FailedPrecondition, "the VM was started with another spec; changing a running VM needs a restart")
		}
		return s.status(ctx, v), nil
	}
	taps := make(map[string]*os.File, len(s.taps))
	for k, f := range s.taps {
		taps[k] = f
	}
	log := s.opts.Log.WithValues("vmi", req.Spec.Namespace+"/"+req.Spec.Name)
	v := vm.New(vm.Config{Dir: s.opts.Dir, EphemeralDir: s.opts.EphemeralDir, QEMUBinary: s.opts.QEMUBinary, Taps: taps, Sandbox: s.sandbox, Log: log})
	s.vm = v
	close(s.created)
	s.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if err := start(v, sctx, req.Spec); err != nil {
		return nil, toStatus(err)
	}
	return s.status(ctx, v), nil
}

func (s *Server) current() (*vm.VM, error) {
	if v := s.VM(); v != nil {
		return v, nil
	}
	return nil, status.Error(codes.FailedPrecondition, "no VM: Sync has not been called")
}

// withVM runs op on the VM and answers with its status.
func (s *Server) withVM(ctx context.Context, op func(*vm.VM, context.Context) error) (*launcherapi.StatusResponse, error) {
	v, err := s.current()
	if err != nil {
		return nil, err
	}
	if err := op(v, ctx); err != nil {
		return nil, toStatus(err)
	}
	return s.status(ctx, v), nil
}

func (s *Server) Pause(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).Pause)
}

func (s *Server) Unpause(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).Unpause)
}

func (s *Server) Reset(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).Reset)
}

func (s *Server) SoftReboot(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).SoftReboot)
}

func (s *Server) Kill(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).Kill)
}

// Shutdown returns once QEMU has exited, or with DeadlineExceeded if the caller stops waiting;
// the shutdown itself goes on either way.
func (s *Server) Shutdown(ctx context.Context, req *launcherapi.ShutdownRequest) (*launcherapi.StatusResponse, error) {
	if req.GracePeriodSeconds < 0 {
		return nil, status.Error(codes.InvalidArgument, "grace_period_seconds: must not be negative")
	}
	grace := time.Duration(req.GracePeriodSeconds) * time.Second
	return s.withVM(ctx, func(v *vm.VM, ctx context.Context) error { return v.Shutdown(ctx, grace) })
}

func (s *Server) Status(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	v := s.VM()
	if v == nil {
		return &launcherapi.StatusResponse{State: launcherapi.State_STATE_PENDING}, nil
	}
	return s.status(ctx, v), nil
}

func (s *Server) Stats(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatsResponse, error) {
	v, err := s.current()
	if err != nil {
		return nil, err
	}
	st, err := v.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return st, nil
}

// Screenshot returns the display as PNG.
func (s *Server) Screenshot(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.ScreenshotResponse, error) {
	v, err := s.current()
	if err != nil {
		return nil, err
	}
	png, err := v.Screenshot(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &launcherapi.ScreenshotResponse{Png: png}, nil
}

// HotplugDisks makes the VM's hotplugged disks the listed ones; each disk it attaches takes
// its descriptor out of those handed in.
func (s *Server) HotplugDisks(ctx context.Context, req *launcherapi.HotplugDisksRequest) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, func(v *vm.VM, ctx context.Context) error {
		return v.HotplugDisks(ctx, req.Disks, s.takeFD)
	})
}

// DumpMemory starts a memory dump into the descriptor handed in under fd_name.
func (s *Server) DumpMemory(ctx context.Context, req *launcherapi.DumpMemoryRequest) (*launcherapi.StatusResponse, error) {
	if req.FdName == "" {
		return nil, status.Error(codes.InvalidArgument, "fd_name: required")
	}
	return s.withVM(ctx, func(v *vm.VM, ctx context.Context) error {
		f, ok := s.takeFD(req.FdName)
		if !ok {
			return fmt.Errorf("memory dump: %w: %q", vm.ErrNoDescriptor, req.FdName)
		}
		return v.DumpMemory(ctx, req.Id, f)
	})
}

// takeFD hands a descriptor over for good: it serves one disk or one dump.
func (s *Server) takeFD(name string) (*os.File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.taps[name]
	delete(s.taps, name)
	return f, ok
}

// Events sends the current state, then every change, and ends after QEMU has exited.
func (s *Server) Events(_ *launcherapi.Empty, stream launcherapi.Launcher_EventsServer) error {
	select {
	case <-s.created:
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	}
	events, cancel := s.VM().Subscribe()
	defer cancel()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
}

// status adds QEMU's own run state to the VM's status while QEMU is up.
func (s *Server) status(ctx context.Context, v *vm.VM) *launcherapi.StatusResponse {
	st := v.Status()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if qs, err := v.QMPStatus(qctx); err == nil {
		st.QmpStatus = qs
	}
	return st
}

// toStatus maps launcher errors onto gRPC codes, so the node agent can tell them apart.
func toStatus(err error) error {
	var qe *qmp.Error
	switch {
	case errors.Is(err, vm.ErrInvalidSpec):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, vm.ErrNoDescriptor):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, vm.ErrNotRunning), errors.Is(err, vm.ErrAlreadyStarted), errors.Is(err, vm.ErrMigrating), errors.Is(err, vm.ErrNoMigration),
		errors.Is(err, vm.ErrDumpInProgress), errors.Is(err, vm.ErrHotplugged):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, qmp.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, qmp.ErrDisconnected):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &qe):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
