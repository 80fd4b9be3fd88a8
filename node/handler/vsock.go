package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"

	"github.com/mdlayher/vsock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// DefaultVhostVsockPath is the host's vhost-vsock device (the vhost_vsock kernel module).
const DefaultVhostVsockPath = "/dev/vhost-vsock"

// vsockFDName is the name the vhost-vsock descriptor is handed to the launcher under.
const vsockFDName = "vhost-vsock"

// openVSOCK opens the vhost-vsock device for a VMI with autoattachVSOCK: the launcher's
// container cannot open host devices, so QEMU gets it as a descriptor, like the taps. A node
// without the device refuses the VM with a message that says so (the VMI fails with it).
func openVSOCK(vmi *v1.VirtualMachineInstance, path, node string) (*os.File, *launcherapi.VSOCK, error) {
	if !vmi.Spec.Domain.Devices.WantsVSOCK() {
		return nil, nil, nil
	}
	cid := vmi.Status.VSOCKCID
	if cid == nil {
		return nil, nil, errors.New("autoattachVSOCK: virt-controller has not assigned the VMI a VSOCK context ID yet")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, status.Errorf(codes.InvalidArgument,
			"autoattachVSOCK: node %s has no %s (its kernel needs the vhost_vsock module), so it cannot give the VM a VSOCK device", node, path)
	}
	if err != nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "autoattachVSOCK: node %s: %v", node, err)
	}
	return f, &launcherapi.VSOCK{GuestCid: *cid, VhostFdName: vsockFDName}, nil
}

// vsockCID is the context ID of a running VMI with a VSOCK device.
func vsockCID(vmi *v1.VirtualMachineInstance) (uint32, error) {
	if !vmi.Spec.Domain.Devices.WantsVSOCK() {
		return 0, fmt.Errorf("VSOCK is not attached")
	}
	if vmi.Status.VSOCKCID == nil {
		return 0, fmt.Errorf("the VMI has no VSOCK context ID")
	}
	return *vmi.Status.VSOCKCID, nil
}

// VSOCKDialer connects to a port of a guest's VSOCK device.
type VSOCKDialer interface {
	Dial(cid, port uint32) (net.Conn, error)
}

// afVSOCK dials over the host's AF_VSOCK sockets.
type afVSOCK struct{}

func (afVSOCK) Dial(cid, port uint32) (net.Conn, error) { return vsock.Dial(cid, port, nil) }

// VSOCK connects to port of a running VMI's VSOCK device, from the host.
func (b backend) VSOCK(ctx context.Context, vmi nodeapi.VMI, port uint32) (io.ReadWriteCloser, error) {
	if _, err := b.running(vmi); err != nil {
		return nil, err
	}
	obj := &v1.VirtualMachineInstance{}
	if err := b.h.client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: vmi.Name}, obj); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", nodeapi.ErrNotFound, vmi, err)
	}
	cid, err := vsockCID(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", nodeapi.ErrBadRequest, vmi, err)
	}
	d := b.h.opts.VSOCK
	if d == nil {
		d = afVSOCK{}
	}
	conn, err := d.Dial(cid, port)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: VSOCK %d:%d: %v", nodeapi.ErrUnavailable, vmi, cid, port, err)
	}
	return conn, nil
}
