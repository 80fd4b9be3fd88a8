package handler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/qvirt/qvirt/api/v1"
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
