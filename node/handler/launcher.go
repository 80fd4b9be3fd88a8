package handler

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/fdpass"
	"github.com/qvirt/qvirt/launcher/server"
)

// launcherConn is the node agent's connection to one VM's launcher.
type launcherConn struct {
	dir    vmDir
	conn   *grpc.ClientConn
	client launcherapi.LauncherClient
	// pid of the launcher, from the socket's peer credentials: its network namespace is the
	// pod's, as the kubelet made it.
	pid int
}

// dialLauncher connects to the launcher serving in dir. It fails fast while the socket is
// missing (the pod is still starting), so the caller can retry later. Every connection gRPC
// makes, the first and any after a reconnect, goes through dir.dial, so none follows a link.
func dialLauncher(dir vmDir) (*launcherConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	raw, err := dir.dial(ctx, server.SocketName)
	if err != nil {
		return nil, fmt.Errorf("launcher socket: %w", err)
	}
	pid, err := peerPID(raw)
	raw.Close()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("passthrough:///"+server.SocketName,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return dir.dial(ctx, server.SocketName)
		}))
	if err != nil {
		return nil, err
	}
	return &launcherConn{dir: dir, conn: conn, client: launcherapi.NewLauncherClient(conn), pid: pid}, nil
}

func peerPID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("launcher peer credentials: %w", serr)
	}
	return int(cred.Pid), nil
}

// netnsPath is the launcher's network namespace.
func (l *launcherConn) netnsPath() string { return fmt.Sprintf("/proc/%d/ns/net", l.pid) }

// sendTaps hands descriptors to the launcher: taps before Sync, hotplugged disks later.
func (l *launcherConn) sendTaps(taps map[string]*os.File) error {
	if len(taps) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := l.dir.dial(ctx, server.FDSocketName)
	if err != nil {
		return fmt.Errorf("launcher fd socket: %w", err)
	}
	defer c.Close()
	return fdpass.SendAll(c, taps)
}

func (l *launcherConn) close() { _ = l.conn.Close() }

// alive reports whether the launcher still answers.
func (l *launcherConn) status(ctx context.Context) (*launcherapi.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return l.client.Status(ctx, &launcherapi.Empty{})
}
