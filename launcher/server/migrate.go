package server

import (
	"context"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/vm"
)

// PrepareMigrationTarget starts this launcher's VM as the target of a migration: QEMU waits
// for the source's state on the VM directory's migration sockets.
func (s *Server) PrepareMigrationTarget(ctx context.Context, req *launcherapi.SyncRequest) (*launcherapi.StatusResponse, error) {
	return s.sync(ctx, req, (*vm.VM).StartIncoming)
}

// Migrate starts sending the VM to a prepared target; the status reports its progress.
func (s *Server) Migrate(ctx context.Context, req *launcherapi.MigrateRequest) (*launcherapi.StatusResponse, error) {
	switch {
	case req.SocketPath == "":
		return nil, status.Error(codes.InvalidArgument, "socket_path: required")
	case !validSocketPath(req.SocketPath):
		return nil, status.Errorf(codes.InvalidArgument, "socket_path: %q is neither absolute nor a plain name", req.SocketPath)
	case req.DisksSocketPath != "" && !validSocketPath(req.DisksSocketPath):
		return nil, status.Errorf(codes.InvalidArgument, "disks_socket_path: %q is neither absolute nor a plain name", req.DisksSocketPath)
	case req.CompletionTimeoutSeconds < 0:
		return nil, status.Error(codes.InvalidArgument, "completion_timeout_seconds: must not be negative")
	case req.ProgressTimeoutSeconds < 0:
		return nil, status.Error(codes.InvalidArgument, "progress_timeout_seconds: must not be negative")
	}
	// A bare name is a socket in the VM directory, where the node agent sees it too.
	req.SocketPath = s.inVMDir(req.SocketPath)
	if req.DisksSocketPath != "" {
		req.DisksSocketPath = s.inVMDir(req.DisksSocketPath)
	}
	return s.withVM(ctx, func(v *vm.VM, ctx context.Context) error { return v.Migrate(ctx, req) })
}

// CancelMigration aborts the outgoing migration; the VM keeps running here.
func (s *Server) CancelMigration(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return s.withVM(ctx, (*vm.VM).CancelMigration)
}

func validSocketPath(p string) bool {
	return filepath.IsAbs(p) || (p == filepath.Base(p) && p != "." && p != "..")
}

func (s *Server) inVMDir(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.opts.Dir, p)
}
