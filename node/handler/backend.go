package handler

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/safepath"
)

// Backend serves the node API from the VMs this node agent runs.
func (h *Handler) Backend() nodeapi.Backend { return backend{h} }

type backend struct{ h *Handler }

// running returns the VM's state if QEMU runs, so streams and commands have something to reach.
func (b backend) running(vmi nodeapi.VMI) (*vmState, error) {
	st := b.h.stateByName(vmi.Namespace, vmi.Name)
	if st == nil {
		// Just after a node agent restart a VM runs here before it is adopted again.
		obj := &v1.VirtualMachineInstance{}
		if err := b.h.client.Get(context.Background(), client.ObjectKey{Namespace: vmi.Namespace, Name: vmi.Name}, obj); err == nil && obj.Status.NodeName == b.h.opts.NodeName {
			b.h.requeue(types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name})
			return nil, fmt.Errorf("%w: %s is being adopted by the node agent", nodeapi.ErrUnavailable, vmi)
		}
		return nil, fmt.Errorf("%w: %s", nodeapi.ErrNotFound, vmi)
	}
	if ls := st.lastStatus(); !running(ls) || st.launcher() == nil {
		return nil, fmt.Errorf("%w: %s is not running yet", nodeapi.ErrUnavailable, vmi)
	}
	return st, nil
}

// Sockets QEMU serves in the VM's directory (launcher/qemuargs.Layout).
const (
	serialSocket = "serial0.sock"
	vncSocket    = "vnc.sock"
)

func (b backend) Console(ctx context.Context, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
	st, err := b.running(vmi)
	if err != nil {
		return nil, err
	}
	return b.openSession(ctx, st, "console", false, serialSocket)
}

func (b backend) VNC(ctx context.Context, vmi nodeapi.VMI, preserve bool) (io.ReadWriteCloser, error) {
	st, err := b.running(vmi)
	if err != nil {
		return nil, err
	}
	return b.openSession(ctx, st, "vnc", preserve, vncSocket)
}

// openSession dials sock in the VM's directory for a session of kind. A socket refused for
// what it is (a link, not a socket, another owner) is logged: something in the launcher pod
// put it there.
func (b backend) openSession(ctx context.Context, st *vmState, kind string, preserve bool, sock string) (io.ReadWriteCloser, error) {
	return st.openSession(kind, preserve, func() (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := st.dir.dial(dctx, sock)
		if err != nil {
			if safepath.Refused(err) {
				b.h.log.Error(err, "refused to open a socket in the VM's directory", "vmi", st.key.String(), "session", kind)
			}
			return nil, err
		}
		return c, nil
	})
}

// PortForward connects to the guest from inside the pod's network namespace, where the
// guest's address is reachable whichever binding wired it.
func (b backend) PortForward(ctx context.Context, vmi nodeapi.VMI, port int, protocol string) (io.ReadWriteCloser, error) {
	st, err := b.running(vmi)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	var nic *PlumbedNIC
	for _, n := range st.nics {
		if n.GuestAddr != "" {
			nic = n
			break
		}
	}
	lc := st.lc
	st.mu.Unlock()
	if nic == nil {
		return nil, fmt.Errorf("%w: %s has no pod network interface", nodeapi.ErrConflict, vmi)
	}
	if !st.takeForward(b.h.opts.MaxPortForwardsPerVMI) {
		return nil, fmt.Errorf("%w: %s has %d port-forward streams open, as many as it may", nodeapi.ErrTooManyRequests, vmi, b.h.opts.MaxPortForwardsPerVMI)
	}
	target := net.JoinHostPort(nic.GuestAddr, strconv.Itoa(port))
	var conn net.Conn
	switch {
	case nic.GuestAddrInPod:
		conn, err = dialInNetns(ctx, lc.netnsPath(), protocol, target)
	default:
		var d net.Dialer
		conn, err = d.DialContext(ctx, protocol, target)
	}
	if err != nil {
		st.releaseForward()
		return nil, fmt.Errorf("%w: %s: %v", nodeapi.ErrUnavailable, target, err)
	}
	return &forward{Conn: conn, release: st.releaseForward}, nil
}

func (b backend) Screenshot(ctx context.Context, vmi nodeapi.VMI) ([]byte, error) {
	st, err := b.running(vmi)
	if err != nil {
		return nil, err
	}
	ctx, cancel := b.h.launcherCall(ctx)
	defer cancel()
	resp, err := st.launcher().client.Screenshot(ctx, &launcherapi.Empty{})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return resp.Png, nil
}

func (b backend) Command(ctx context.Context, vmi nodeapi.VMI, cmd nodeapi.Command) error {
	st, err := b.running(vmi)
	if err != nil {
		return err
	}
	c := st.launcher().client
	ctx, cancel := b.h.launcherCall(ctx)
	defer cancel()
	switch cmd {
	case nodeapi.Pause:
		_, err = c.Pause(ctx, &launcherapi.Empty{})
	case nodeapi.Unpause:
		_, err = c.Unpause(ctx, &launcherapi.Empty{})
	case nodeapi.Reset:
		_, err = c.Reset(ctx, &launcherapi.Empty{})
	case nodeapi.SoftReboot:
		_, err = c.SoftReboot(ctx, &launcherapi.Empty{})
	default:
		return fmt.Errorf("%w: unknown command %q", nodeapi.ErrBadRequest, cmd)
	}
	if err != nil {
		return fromGRPC(err)
	}
	b.h.requeue(st.key)
	return nil
}

func fromGRPC(err error) error {
	switch status.Code(err) {
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %s", nodeapi.ErrConflict, status.Convert(err).Message())
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", nodeapi.ErrUnavailable, status.Convert(err).Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", nodeapi.ErrBadRequest, status.Convert(err).Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: the launcher did not answer in time: %s", nodeapi.ErrUnavailable, status.Convert(err).Message())
	case codes.Canceled:
		// The connection to a launcher that stopped answering was closed under the call.
		return fmt.Errorf("%w: %s", nodeapi.ErrUnavailable, status.Convert(err).Message())
	}
	return err
}

// openSession keeps one session of a kind per VM, as KubeVirt's virt-handler does: a new one
// takes over, closing the old, unless the caller asked to preserve it. Two opened at once end
// with the later one open.
func (st *vmState) openSession(kind string, preserve bool, dial func() (net.Conn, error)) (io.ReadWriteCloser, error) {
	if preserve && st.session(kind) != nil {
		return nil, fmt.Errorf("%w: a %s session is already open", nodeapi.ErrSessionBusy, kind)
	}
	conn, err := dial()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", nodeapi.ErrUnavailable, kind, err)
	}
	s := &session{Conn: conn}
	s.onClose = func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.sessions[kind] == s {
			delete(st.sessions, kind)
		}
	}
	st.mu.Lock()
	old := st.sessions[kind]
	if old != nil && preserve {
		st.mu.Unlock()
		_ = conn.Close()
		return nil, fmt.Errorf("%w: a %s session is already open", nodeapi.ErrSessionBusy, kind)
	}
	st.sessions[kind] = s
	st.mu.Unlock()
	// Outside the lock: closing a session takes it.
	if old != nil {
		_ = old.Close()
	}
	return s, nil
}

func (st *vmState) session(kind string) io.Closer {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sessions[kind]
}

type session struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (s *session) Close() error {
	s.once.Do(s.onClose)
	return s.Conn.Close()
}

// forward is a port-forward connection; closing it frees its place among the VMI's forwards.
type forward struct {
	net.Conn
	once    sync.Once
	release func()
}

func (f *forward) Close() error {
	f.once.Do(f.release)
	return f.Conn.Close()
}

// takeForward reserves a place for one more port-forward of the VM, at most limit (0: any).
func (st *vmState) takeForward(limit int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if limit > 0 && st.forwards >= limit {
		return false
	}
	st.forwards++
	return true
}

func (st *vmState) releaseForward() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.forwards--
}
