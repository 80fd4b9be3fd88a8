package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// RunOptions configure a launcher process.
type RunOptions struct {
	Options
	// StopGrace is how long the guest gets to power off when the launcher itself is told to
	// stop (SIGTERM) before the VM was shut down through the API.
	StopGrace time.Duration
	// Linger keeps the API up after QEMU exits so the node agent can read the final status.
	Linger time.Duration
	// Spec, when set, starts the VM at once instead of waiting for a Sync (standalone use).
	Spec *launcherapi.VMSpec
}

// Run serves the launcher API until the VM has exited (plus Linger), or until ctx ends, in
// which case the VM is shut down with StopGrace first. A launcher's life is its VM's life.
func Run(ctx context.Context, opts RunOptions) error {
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return err
	}
	s := New(opts.Options)
	log := opts.Log

	apiL, err := listenUnix(filepath.Join(opts.Dir, SocketName))
	if err != nil {
		return err
	}
	fdL, err := listenUnix(filepath.Join(opts.Dir, FDSocketName))
	if err != nil {
		apiL.Close()
		return err
	}
	gs := grpc.NewServer()
	launcherapi.RegisterLauncherServer(gs, s)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(apiL) }()
	go func() { errc <- s.ServeFDs(fdL) }()
	defer func() {
		fdL.Close()
		stopGRPC(gs)
	}()
	log.Info("launcher serving", "socket", apiL.Addr().String())
	if opts.Spec != nil {
		if _, err := s.Sync(ctx, &launcherapi.SyncRequest{Spec: opts.Spec}); err != nil {
			return fmt.Errorf("start VM from spec: %w", err)
		}
	}

	// exited stays nil (blocks forever) until a VM exists.
	var exited <-chan struct{}
	created := s.VMCreated()
	for {
		select {
		case <-created:
			created = nil
			exited = s.VM().Exited()
		case <-exited:
			st := s.VM().Status()
			log.Info("VM exited; launcher stopping", "state", st.State.String(), "reason", st.ExitReason.String(), "message", st.Message)
			select {
			case <-time.After(opts.Linger):
			case <-ctx.Done():
			}
			return nil
		case err := <-errc:
			if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("launcher API: %w", err)
			}
		case <-ctx.Done():
			log.Info("launcher asked to stop", "grace", opts.StopGrace)
			if v := s.VM(); v != nil {
				sctx, cancel := context.WithTimeout(context.Background(), opts.StopGrace+30*time.Second)
				err := v.Shutdown(sctx, opts.StopGrace)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					log.Error(err, "VM shutdown")
				}
			}
			return nil
		}
	}
}

func listenUnix(path string) (*net.UnixListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}

// stopGRPC lets in-flight calls (such as the Shutdown that ended the VM) answer, but never
// waits on a stream that a client keeps open.
func stopGRPC(gs *grpc.Server) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		gs.Stop()
	}
}
