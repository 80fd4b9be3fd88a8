// Package nodeapi is the API a node agent (virt-handler) serves to virt-api over mutual TLS:
// console, VNC and port-forward streams to a VM's sockets, screenshots, and the commands that
// act on a running VM. virt-api holds the client; the node agent implements Backend.
package nodeapi

import (
	"context"
	"errors"
	"io"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/wsstream"
)

// VMI names a VM instance on the node.
type VMI struct {
	Namespace string
	Name      string
}

func (v VMI) String() string { return v.Namespace + "/" + v.Name }

// Command is an action on a running VM.
type Command string

const (
	Pause      Command = "pause"
	Unpause    Command = "unpause"
	Reset      Command = "reset"
	SoftReboot Command = "softreboot"
)

// Commands lists the commands the API accepts.
var Commands = []Command{Pause, Unpause, Reset, SoftReboot}

// Backend is what the node agent provides. Streams are closed by the API when either side ends.
type Backend interface {
	Console(ctx context.Context, vmi VMI) (io.ReadWriteCloser, error)
	VNC(ctx context.Context, vmi VMI, preserveSession bool) (io.ReadWriteCloser, error)
	PortForward(ctx context.Context, vmi VMI, port int, protocol string) (io.ReadWriteCloser, error)
	// VSOCK connects to port of the guest's VSOCK device (autoattachVSOCK).
	VSOCK(ctx context.Context, vmi VMI, port uint32) (io.ReadWriteCloser, error)
	Screenshot(ctx context.Context, vmi VMI) ([]byte, error)
	// GuestAgent is what the VM's guest agent last reported; ErrConflict when none answers.
	GuestAgent(ctx context.Context, vmi VMI) (*v1.VirtualMachineInstanceGuestAgentInfo, error)
	Command(ctx context.Context, vmi VMI, cmd Command) error
}

// Errors a Backend returns to choose the HTTP status virt-api passes on to the user. They
// survive the trip: the client returns errors that match them with errors.Is.
var (
	// ErrNotFound: the VMI does not run on this node.
	ErrNotFound = errors.New("VMI not found on this node")
	// ErrConflict: the VMI is in a state that forbids the request (e.g. already paused).
	ErrConflict = errors.New("conflict")
	// ErrSessionBusy: a console or VNC session is open and the request asked to preserve it.
	ErrSessionBusy = errors.New("session busy")
	// ErrUnavailable: the VM is not reachable yet (booting, launcher not ready).
	ErrUnavailable = errors.New("unavailable")
	// ErrBadRequest: the request itself is malformed.
	ErrBadRequest = errors.New("bad request")
	// ErrTooManyRequests: the node agent serves as many requests or streams as it may, or the
	// VMI has as many streams of the kind open as it may; try again later.
	ErrTooManyRequests = errors.New("too many requests")
)

// EndpointAnnotation is set on each Node by its node agent: where virt-api reaches it.
const EndpointAnnotation = "qvirt.io/handler-endpoint"

// Subprotocol is the websocket subprotocol of every stream, as KubeVirt's.
const Subprotocol = wsstream.Subprotocol
