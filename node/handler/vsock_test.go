package handler

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/nodeapi"
)

func TestOpenVSOCK(t *testing.T) {
	on, cid := true, uint32(7)
	vmi := &v1.VirtualMachineInstance{}
	if f, vs, err := openVSOCK(vmi, "/nonexistent", "n1"); f != nil || vs != nil || err != nil {
		t.Fatalf("without autoattachVSOCK: %v %v %v", f, vs, err)
	}
	vmi.Spec.Domain.Devices.AutoattachVSOCK = &on
	if _, _, err := openVSOCK(vmi, "/nonexistent", "n1"); err == nil || !strings.Contains(err.Error(), "context ID") {
		t.Errorf("before a context ID is assigned: %v", err)
	}
	vmi.Status.VSOCKCID = &cid
	_, _, err := openVSOCK(vmi, filepath.Join(t.TempDir(), "vhost-vsock"), "n1")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node n1 has no") || !strings.Contains(err.Error(), "vhost_vsock") {
		t.Errorf("on a node without the device: %v (the VMI fails only on InvalidArgument)", err)
	}
	dev := filepath.Join(t.TempDir(), "vhost-vsock")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, vs, err := openVSOCK(vmi, dev, "n1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if vs.GuestCid != 7 || vs.VhostFdName != vsockFDName {
		t.Errorf("VSOCK %v", vs)
	}
	if got, err := vsockCID(vmi); err != nil || got != 7 {
		t.Errorf("vsockCID: %d %v", got, err)
	}
	if _, err := vsockCID(&v1.VirtualMachineInstance{}); err == nil {
		t.Error("vsockCID of a VMI without VSOCK")
	}
}

// fakeVSOCK records what it dials and answers with one end of a pipe, or fails.
type fakeVSOCK struct {
	cid, port uint32
	err       error
}

func (f *fakeVSOCK) Dial(cid, port uint32) (net.Conn, error) {
	f.cid, f.port = cid, port
	if f.err != nil {
		return nil, f.err
	}
	a, b := net.Pipe()
	go func() { _, _ = b.Write([]byte("hello from the guest")); b.Close() }()
	return a, nil
}

// TestVSOCKDialsTheVMIsContextID: the node API's vsock stream dials the context ID in the VMI's
// status, at the port asked; a VMI without VSOCK and a guest that does not answer are reported
// as such.
func TestVSOCKDialsTheVMIsContextID(t *testing.T) {
	on, cid := true, uint32(12)
	withVSOCK := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"}}
	withVSOCK.Spec.Domain.Devices.AutoattachVSOCK = &on
	withVSOCK.Status.VSOCKCID = &cid
	without := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "uid-b"}}
	dialer := &fakeVSOCK{}
	h := New(testClient(t, withVSOCK, without).Build(), Options{NodeName: "n1", VSOCK: dialer})
	for _, vmi := range []*v1.VirtualMachineInstance{withVSOCK, without} {
		st := h.state(vmi, true)
		st.last = &launcherapi.StatusResponse{State: launcherapi.State_STATE_RUNNING}
		st.lc = &launcherConn{}
	}
	b := backend{h}
	conn, err := b.VSOCK(context.Background(), nodeapi.VMI{Namespace: "ns", Name: "a"}, 1234)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(conn)
	conn.Close()
	if dialer.cid != 12 || dialer.port != 1234 || string(got) != "hello from the guest" {
		t.Errorf("dialed %d:%d, read %q", dialer.cid, dialer.port, got)
	}
	if _, err := b.VSOCK(context.Background(), nodeapi.VMI{Namespace: "ns", Name: "b"}, 1234); !errors.Is(err, nodeapi.ErrBadRequest) || !strings.Contains(err.Error(), "VSOCK is not attached") {
		t.Errorf("a VMI without VSOCK: %v", err)
	}
	dialer.err = errors.New("connection reset by peer")
	if _, err := b.VSOCK(context.Background(), nodeapi.VMI{Namespace: "ns", Name: "a"}, 99); !errors.Is(err, nodeapi.ErrUnavailable) || !strings.Contains(err.Error(), "12:99") {
		t.Errorf("a guest that does not answer: %v", err)
	}
	if _, err := b.VSOCK(context.Background(), nodeapi.VMI{Namespace: "ns", Name: "gone"}, 1); !errors.Is(err, nodeapi.ErrNotFound) {
		t.Errorf("a VMI not on this node: %v", err)
	}
}
