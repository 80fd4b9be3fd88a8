package qmp

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestQEMUHotplugDiskThroughAnFDSet attaches a raw file QEMU never opens by path: the file
// goes into an fdset, a protocol and a format node open it through /dev/fdset, and a SCSI
// disk and a virtio disk on a PCIe root port use them; then it takes all of it apart again
// and QEMU holds the file no more.
func TestQEMUHotplugDiskThroughAnFDSet(t *testing.T) {
	vm := startQEMU(t, "-device", "virtio-scsi-pci,id=scsi0",
		"-device", "pcie-root-port,id=port0,bus=pcie.0,chassis=1,addr=0x1e.0")
	c := vm.client
	ctx := within(t, time.Minute)
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	attach := func(name string) (FDInfo, string) {
		t.Helper()
		path := filepath.Join(vm.dir, name+".raw")
		if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // QEMU has its own copy
		info, err := c.AddFD(ctx, f, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.BlockdevAdd(ctx, map[string]any{"driver": "file", "node-name": name + "-file", "filename": fmt.Sprintf("/dev/fdset/%d", info.FDSetID)}); err != nil {
			t.Fatal(err)
		}
		if err := c.BlockdevAdd(ctx, map[string]any{"driver": "raw", "node-name": name + "-fmt", "file": name + "-file"}); err != nil {
			t.Fatal(err)
		}
		return info, path
	}
	scsiSet, scsiPath := attach("scsi")
	if err := c.DeviceAdd(ctx, map[string]any{"driver": "scsi-hd", "id": "disk-scsi", "drive": "scsi-fmt", "bus": "scsi0.0", "scsi-id": 0, "lun": 2, "serial": "S1"}); err != nil {
		t.Fatal(err)
	}
	_, virtioPath := attach("virtio")
	if err := c.DeviceAdd(ctx, map[string]any{"driver": "virtio-blk-pci", "id": "disk-virtio", "drive": "virtio-fmt", "bus": "port0"}); err != nil {
		t.Fatal(err)
	}
	props, err := c.QOMList(ctx, "/machine/peripheral")
	if err != nil {
		t.Fatal(err)
	}
	children := map[string]string{}
	for _, p := range props {
		children[p.Name] = p.Type
	}
	if children["disk-scsi"] != "child<scsi-hd>" || children["disk-virtio"] != "child<virtio-blk-pci>" {
		t.Errorf("peripherals after device_add: %v", props)
	}
	if n := qemuHolds(t, vm, scsiPath); n == 0 {
		t.Fatal("QEMU does not hold the SCSI disk's file")
	}

	// A SCSI disk leaves without the guest's help.
	if err := c.DeviceDelWait(ctx, "disk-scsi"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QOMList(ctx, "/machine/peripheral/disk-scsi"); !HasClass(err, ClassDeviceNotFound) {
		t.Errorf("qom-list of the removed disk: %v", err)
	}
	for _, n := range []string{"scsi-fmt", "scsi-file"} {
		if err := c.BlockdevDel(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RemoveFD(ctx, scsiSet.FDSetID); err != nil {
		t.Fatal(err)
	}
	if n := qemuHolds(t, vm, scsiPath); n != 0 {
		t.Errorf("QEMU still holds the removed disk's file %d times", n)
	}
	if qemuHolds(t, vm, virtioPath) == 0 {
		t.Error("the virtio disk's file went with the SCSI disk")
	}

	// A PCIe device waits for a guest that is not there: the wait ends with the context.
	short := within(t, 2*time.Second)
	if err := c.DeviceDelWait(short, "disk-virtio"); !errors.Is(err, ErrTimeout) {
		t.Errorf("device_del of a PCIe disk without a guest: %v", err)
	}
}

// qemuHolds counts QEMU's descriptors open on path.
func qemuHolds(t *testing.T, vm *qemuVM, path string) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", vm.cmd.Process.Pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// TestQEMUDumpGuestMemory dumps a running guest's 64 MiB into a descriptor: an ELF core at
// least that large, and the guest runs again afterwards.
func TestQEMUDumpGuestMemory(t *testing.T) {
	vm := startQEMU(t)
	c := vm.client
	ctx := within(t, time.Minute)
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := c.QueryDump(ctx); err != nil || d.Status != DumpNone {
		t.Errorf("query-dump before any dump: %+v %v", d, err)
	}
	path := filepath.Join(vm.dir, "memory.elf")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.GetFD(ctx, "dump", f); err != nil {
		t.Fatal(err)
	}
	events, cancel := c.Subscribe(64)
	defer cancel()
	if err := c.DumpGuestMemory(ctx, "fd:dump", DumpELF); err != nil {
		t.Fatal(err)
	}
	e, err := WaitEvent(ctx, events, EventName("DUMP_COMPLETED"))
	if err != nil {
		t.Fatal(err)
	}
	info, msg, _ := DumpCompletedResult(e)
	if info.Status != DumpCompleted || msg != "" || info.Completed != info.Total || info.Total < 64<<20 {
		t.Fatalf("DUMP_COMPLETED %+v %q", info, msg)
	}
	if d, err := c.QueryDump(ctx); err != nil || d != info {
		t.Errorf("query-dump after the dump: %+v %v", d, err)
	}
	// QEMU owns a descriptor the fd: protocol used: it has no name any more.
	if err := c.CloseFD(ctx, "dump"); !HasClass(err, ClassGenericError) {
		t.Errorf("closefd after the dump: %v", err)
	}
	if _, err := WaitEvent(ctx, events, EventName("RESUME")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx); err != nil || st.Status != StatusRunning {
		t.Errorf("after the dump: %+v %v", st, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	core, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if core.Type != elf.ET_CORE || len(b) < 64<<20 {
		t.Errorf("dump is %v of %d bytes", core.Type, len(b))
	}
}
