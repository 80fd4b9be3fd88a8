package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// bareSpec is a VM with no guest to boot (the firmware finds nothing and waits): enough for
// what QEMU itself does.
func bareSpec(name string) *launcherapi.VMSpec {
	return &launcherapi.VMSpec{
		Namespace: "test", Name: name, MachineType: "q35", Accel: launcherapi.Accel_ACCEL_TCG,
		Cpu: &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1}, MemoryBytes: 64 << 20, Acpi: true,
	}
}

func startBareVM(t *testing.T, spec *launcherapi.VMSpec, cfg Config) *VM {
	t.Helper()
	cfg.Dir = filepath.Join(t.TempDir(), "vm")
	v := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.Start(ctx, spec); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = v.Kill(context.Background()) })
	return v
}

// fdStore plays the launcher server's descriptors: files handed in by name, taken once.
type fdStore struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (s *fdStore) take(name string) (*os.File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[name]
	delete(s.files, name)
	return f, ok
}

// handIn creates a raw image of 8 MiB and hands it in, opened read-write, under name.
func (s *fdStore) handIn(t *testing.T, name string) (*os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".raw")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 8<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]*os.File{}
	}
	s.files[name] = f
	return f, path
}

func fdDisk(name string, bus launcherapi.Bus, serial string) *launcherapi.Disk {
	return &launcherapi.Disk{Name: name, Bus: bus, Serial: serial,
		Source: &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: "disk-" + name}}}
}

func hotplugged(v *VM) []string {
	var out []string
	for _, d := range v.Status().HotpluggedDisks {
		out = append(out, d.Name+"="+d.Target)
	}
	return out
}

// qemuState is what QEMU holds of the hotplugged disks: block nodes, descriptor sets, devices.
type qemuState struct {
	nodes, devices []string
	fdsets         int
}

func readQEMUState(t *testing.T, v *VM) qemuState {
	t.Helper()
	ctx := within(t, 10*time.Second)
	mon := v.monitor()
	var st qemuState
	var nodes []struct {
		NodeName string `json:"node-name"`
	}
	if err := mon.Execute(ctx, "query-named-block-nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		st.nodes = append(st.nodes, n.NodeName)
	}
	var sets []struct {
		FDs []any `json:"fds"`
	}
	if err := mon.Execute(ctx, "query-fdsets", nil, &sets); err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		// A removed set lingers, empty, until QEMU's last duplicate of it is closed.
		if len(s.FDs) > 0 {
			st.fdsets++
		}
	}
	props, err := mon.QOMList(ctx, "/machine/peripheral")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range props {
		if strings.HasPrefix(p.Type, "child<") {
			st.devices = append(st.devices, p.Name)
		}
	}
	slices.Sort(st.nodes)
	slices.Sort(st.devices)
	return st
}

func (a qemuState) equal(b qemuState) bool {
	return slices.Equal(a.nodes, b.nodes) && slices.Equal(a.devices, b.devices) && a.fdsets == b.fdsets
}

// qemuHolds reports whether QEMU has path open.
func qemuHolds(t *testing.T, v *VM, path string) bool {
	t.Helper()
	dir := filepath.Join("/proc", strconv.FormatInt(v.Status().QemuPid, 10), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
			return true
		}
	}
	return false
}

func qomGet[T any](t *testing.T, v *VM, path, prop string) T {
	t.Helper()
	var out T
	if err := v.monitor().QOMGet(within(t, 10*time.Second), path, prop, &out); err != nil {
		t.Fatalf("qom-get %s %s: %v", path, prop, err)
	}
	return out
}

// TestHotplugDisksAttachAndDetach attaches two SCSI disks (one read-only) and a virtio disk
// handed in as descriptors to a q35 VM that started with a SCSI and a virtio disk of its own, detaches a
// SCSI one, refuses what cannot be attached without leaving anything behind, and shuts down.
func TestHotplugDisksAttachAndDetach(t *testing.T) {
	testenv.RequireQEMU(t)
	spec := bareSpec("hotplug")
	spec.Hotplug = &launcherapi.Hotplug{PcieRootPorts: 2}
	spec.Disks = []*launcherapi.Disk{
		{Name: "scratch", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 1 << 20}}},
		{Name: "data", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 1 << 20}}},
	}
	v := startBareVM(t, spec, Config{})
	ctx := within(t, 2*time.Minute)
	before := readQEMUState(t, v)

	var fds fdStore
	fileA, pathA := fds.handIn(t, "disk-a")
	_, pathB := fds.handIn(t, "disk-b")
	_, pathC := fds.handIn(t, "disk-c")
	a := fdDisk("a", launcherapi.Bus_BUS_SCSI, "SERIAL-A")
	b := fdDisk("b", launcherapi.Bus_BUS_SCSI, "SERIAL-B")
	b.ReadOnly = true
	c := fdDisk("c", launcherapi.Bus_BUS_VIRTIO, "")
	t0 := time.Now()
	if err := v.HotplugDisks(ctx, []*launcherapi.Disk{a, b, c}, fds.take); err != nil {
		t.Fatal(err)
	}
	t.Logf("three disks attached in %v", time.Since(t0))
	// Cold-plugged disks hold sda and vda.
	if got, want := hotplugged(v), []string{"a=sdb", "b=sdc", "c=vdb"}; !slices.Equal(got, want) {
		t.Errorf("hotplugged disks %v, want %v", got, want)
	}
	if len(fds.files) != 0 {
		t.Errorf("descriptors left unused: %v", fds.files)
	}
	if _, err := fileA.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the launcher's copy of a used descriptor is open: %v", err)
	}
	for _, p := range []string{pathA, pathB, pathC} {
		if !qemuHolds(t, v, p) {
			t.Errorf("QEMU does not hold %s", p)
		}
	}

	t.Run("QEMU has the devices where they belong", func(t *testing.T) {
		var blocks []struct {
			QDev     string `json:"qdev"`
			Inserted struct {
				NodeName string `json:"node-name"`
				File     string `json:"file"`
				RO       bool   `json:"ro"`
			} `json:"inserted"`
		}
		if err := v.monitor().Execute(ctx, "query-block", nil, &blocks); err != nil {
			t.Fatal(err)
		}
		files, readOnly := map[string]string{}, map[string]bool{}
		for _, bl := range blocks {
			dev := strings.TrimSuffix(strings.TrimPrefix(bl.QDev, "/machine/peripheral/"), "/virtio-backend")
			files[dev], readOnly[dev] = bl.Inserted.File, bl.Inserted.RO
		}
		if readOnly["ua-a"] || !readOnly["ua-b"] || readOnly["ua-c"] {
			t.Errorf("read-only disks: %v, want ua-b alone", readOnly)
		}
		for dev, want := range map[string]string{"ua-a": "/dev/fdset/", "ua-b": "/dev/fdset/", "ua-c": "/dev/fdset/"} {
			if !strings.HasPrefix(files[dev], want) {
				t.Errorf("query-block: %s opens %q; all: %v", dev, files[dev], files)
			}
		}
		for dev, want := range map[string]string{"ua-a": "SERIAL-A", "ua-b": "SERIAL-B"} {
			if got := qomGet[string](t, v, "/machine/peripheral/"+dev, "serial"); got != want {
				t.Errorf("%s serial %q, want %q", dev, got, want)
			}
		}
		// The cold-plugged SCSI disk keeps LUN 0.
		for dev, want := range map[string]int{"ua-scratch": 0, "ua-a": 1, "ua-b": 2} {
			if got := qomGet[int](t, v, "/machine/peripheral/"+dev, "lun"); got != want {
				t.Errorf("%s at LUN %d, want %d", dev, got, want)
			}
		}
		if bus := qomGet[string](t, v, "/machine/peripheral/ua-c", "parent_bus"); !strings.Contains(bus, "hotplug-port0") {
			t.Errorf("the virtio disk sits on %s, want the first hotplug port", bus)
		}
	})

	t.Run("the same set again changes nothing", func(t *testing.T) {
		st := readQEMUState(t, v)
		if err := v.HotplugDisks(ctx, []*launcherapi.Disk{c, b, a}, fds.take); err != nil {
			t.Fatal(err)
		}
		if after := readQEMUState(t, v); !after.equal(st) {
			t.Errorf("QEMU changed: %+v, was %+v", after, st)
		}
	})

	t.Run("detaching a scsi disk keeps the others", func(t *testing.T) {
		t0 := time.Now()
		if err := v.HotplugDisks(ctx, []*launcherapi.Disk{b, c}, fds.take); err != nil {
			t.Fatal(err)
		}
		t.Logf("detached in %v", time.Since(t0))
		if got, want := hotplugged(v), []string{"b=sdc", "c=vdb"}; !slices.Equal(got, want) {
			t.Errorf("hotplugged disks %v, want %v", got, want)
		}
		if qemuHolds(t, v, pathA) || !qemuHolds(t, v, pathB) || !qemuHolds(t, v, pathC) {
			t.Error("QEMU holds the wrong files after the detach")
		}
		st := readQEMUState(t, v)
		if slices.Contains(st.devices, "ua-a") || !slices.Contains(st.devices, "ua-b") || !slices.Contains(st.devices, "ua-c") {
			t.Errorf("devices after the detach: %v", st.devices)
		}
		if len(st.nodes) != len(before.nodes)+4 || st.fdsets != 2 {
			t.Errorf("block nodes %v and %d fdsets after the detach; before any hotplug %v", st.nodes, st.fdsets, before.nodes)
		}
		// A new disk takes the name and the LUN the detached one left.
		_, pathD := fds.handIn(t, "disk-d")
		d := fdDisk("d", launcherapi.Bus_BUS_SCSI, "")
		if err := v.HotplugDisks(ctx, []*launcherapi.Disk{b, c, d}, fds.take); err != nil {
			t.Fatal(err)
		}
		if got, want := hotplugged(v), []string{"b=sdc", "c=vdb", "d=sdb"}; !slices.Equal(got, want) {
			t.Errorf("hotplugged disks %v, want %v", got, want)
		}
		if lun := qomGet[int](t, v, "/machine/peripheral/ua-d", "lun"); lun != 1 || !qemuHolds(t, v, pathD) {
			t.Errorf("the new disk at LUN %d", lun)
		}
		if err := v.HotplugDisks(ctx, []*launcherapi.Disk{b, c}, fds.take); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("what cannot be attached leaves nothing behind", func(t *testing.T) {
		st := readQEMUState(t, v)
		list := func(extra *launcherapi.Disk) []*launcherapi.Disk { return []*launcherapi.Disk{b, c, extra} }

		err := v.HotplugDisks(ctx, list(fdDisk("x", launcherapi.Bus_BUS_SCSI, "")), fds.take)
		if !errors.Is(err, ErrNoDescriptor) || !strings.Contains(err.Error(), `"disk-x"`) {
			t.Errorf("a disk without its descriptor: %v", err)
		}
		t.Logf("without a descriptor: %v", err)

		// QEMU refuses the format node: a raw file is no qcow2 image.
		f, path := fds.handIn(t, "disk-q")
		q := fdDisk("q", launcherapi.Bus_BUS_VIRTIO, "")
		q.GetFd().Format = launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2
		err = v.HotplugDisks(ctx, list(q), fds.take)
		if err == nil || !strings.Contains(err.Error(), "disk q") {
			t.Errorf("a raw file as qcow2: %v", err)
		}
		t.Logf("a raw file as qcow2: %v", err)
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) || len(fds.files) != 0 {
			t.Errorf("the failed disk's descriptor: %v, left %v", err, fds.files)
		}
		if qemuHolds(t, v, path) {
			t.Error("QEMU holds the failed disk's file")
		}

		sata := fdDisk("s", launcherapi.Bus_BUS_SATA, "")
		err = v.HotplugDisks(ctx, list(sata), fds.take)
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "SATA") {
			t.Errorf("a SATA disk: %v", err)
		}
		t.Logf("a SATA disk: %v", err)

		if after := readQEMUState(t, v); !after.equal(st) {
			t.Errorf("QEMU after the failures: %+v, was %+v", after, st)
		}
		if got, want := hotplugged(v), []string{"b=sdc", "c=vdb"}; !slices.Equal(got, want) {
			t.Errorf("hotplugged disks %v, want %v", got, want)
		}

		// An invalid disk does not hold up a valid one.
		fds.handIn(t, "disk-e")
		err = v.HotplugDisks(ctx, []*launcherapi.Disk{b, c, sata, fdDisk("e", launcherapi.Bus_BUS_SCSI, "")}, fds.take)
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("a SATA disk beside a SCSI one: %v", err)
		}
		if got, want := hotplugged(v), []string{"b=sdc", "c=vdb", "e=sdb"}; !slices.Equal(got, want) {
			t.Errorf("hotplugged disks %v, want %v", got, want)
		}
		if err := v.HotplugDisks(ctx, []*launcherapi.Disk{b, c}, fds.take); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stats name the hotplugged disks", func(t *testing.T) {
		st, err := v.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var drives []string
		for _, b := range st.Block {
			drives = append(drives, b.Drive)
		}
		slices.Sort(drives)
		if want := []string{"b", "c", "data", "scratch"}; !slices.Equal(drives, want) {
			t.Errorf("block stats of %v, want %v", drives, want)
		}
	})

	// No guest powers off: the grace runs out and QEMU quits with the disks attached.
	if err := v.Shutdown(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.State != launcherapi.State_STATE_STOPPED || len(st.HotpluggedDisks) != 0 {
		t.Errorf("after shutdown: %v", st)
	}
}

// TestHotplugVirtioDetachNeedsTheGuest: with no guest to acknowledge the unplug, a virtio
// disk stays; the detach reports it and the disk is listed until QEMU lets it go. The VM is
// "pc": its disks go onto the root bus.
func TestHotplugVirtioDetachNeedsTheGuest(t *testing.T) {
	testenv.RequireQEMU(t)
	spec := bareSpec("hotplug-pc")
	spec.MachineType = "pc"
	spec.Hotplug = &launcherapi.Hotplug{}
	v := startBareVM(t, spec, Config{DetachTimeout: 2 * time.Second})
	ctx := within(t, time.Minute)
	var fds fdStore
	fds.handIn(t, "disk-v")
	d := fdDisk("v", launcherapi.Bus_BUS_VIRTIO, "V1")
	if err := v.HotplugDisks(ctx, []*launcherapi.Disk{d}, fds.take); err != nil {
		t.Fatal(err)
	}
	if got := hotplugged(v); !slices.Equal(got, []string{"v=vda"}) {
		t.Errorf("hotplugged %v", got)
	}
	if bus := qomGet[string](t, v, "/machine/peripheral/ua-v", "parent_bus"); !strings.HasSuffix(bus, "pci.0") {
		t.Errorf("the virtio disk sits on %s, want the root bus", bus)
	}
	err := v.HotplugDisks(ctx, nil, fds.take)
	if !errors.Is(err, qmp.ErrTimeout) || !strings.Contains(err.Error(), "did not release") {
		t.Errorf("detach without a guest: %v", err)
	}
	t.Logf("detach without a guest: %v", err)
	if got := hotplugged(v); !slices.Equal(got, []string{"v=vda"}) {
		t.Errorf("after the detach ran out: %v", got)
	}
	// Listed again while QEMU still waits for the guest: it cannot come back yet.
	if err := v.HotplugDisks(ctx, []*launcherapi.Disk{d}, fds.take); err == nil || !strings.Contains(err.Error(), "still being detached") {
		t.Errorf("attaching a disk being detached: %v", err)
	}
	if err := v.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.ExitReason != launcherapi.ExitReason_EXIT_REASON_KILLED || len(st.HotpluggedDisks) != 0 {
		t.Errorf("after kill: %v", st)
	}
}

// TestHotplugNeedsRoom: a VM started without spec.hotplug takes no disks, and one with no
// spare root port no virtio disk.
func TestHotplugNeedsRoom(t *testing.T) {
	testenv.RequireQEMU(t)
	v := startBareVM(t, bareSpec("no-hotplug"), Config{})
	ctx := within(t, time.Minute)
	var fds fdStore
	fds.handIn(t, "disk-a")
	err := v.HotplugDisks(ctx, []*launcherapi.Disk{fdDisk("a", launcherapi.Bus_BUS_SCSI, "")}, fds.take)
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "spec.hotplug") {
		t.Errorf("hotplug into a VM without room: %v", err)
	}
	if err := v.HotplugDisks(ctx, nil, fds.take); err != nil {
		t.Errorf("an empty set: %v", err)
	}

	spec := bareSpec("no-ports")
	spec.Hotplug = &launcherapi.Hotplug{}
	w := startBareVM(t, spec, Config{})
	err = w.HotplugDisks(ctx, []*launcherapi.Disk{fdDisk("a", launcherapi.Bus_BUS_VIRTIO, "")}, fds.take)
	if err == nil || !strings.Contains(err.Error(), "root port") {
		t.Errorf("a virtio disk without a spare port: %v", err)
	}
	if got := fmt.Sprint(hotplugged(w)); got != "[]" {
		t.Errorf("hotplugged %s", got)
	}
}

// TestHotplugIntoABootedGuest: the guest sees a hotplugged SCSI and virtio disk with their
// serials, and with its PCIe hotplug driver acknowledges the virtio disk's unplug, so both
// detach.
func TestHotplugIntoABootedGuest(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	spec := guestSpec(g, "hotplug-guest")
	spec.Hotplug = &launcherapi.Hotplug{PcieRootPorts: 2}
	v, con := startVM(t, spec, nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 3*time.Minute)
	var fds fdStore
	fds.handIn(t, "disk-s")
	fds.handIn(t, "disk-v")
	s := fdDisk("s", launcherapi.Bus_BUS_SCSI, "SCSI-S")
	d := fdDisk("v", launcherapi.Bus_BUS_VIRTIO, "VIRTIO-V")
	if err := v.HotplugDisks(ctx, []*launcherapi.Disk{s, d}, fds.take); err != nil {
		t.Fatal(err)
	}
	if got := hotplugged(v); !slices.Equal(got, []string{"s=sda", "v=vda"}) {
		t.Errorf("hotplugged %v", got)
	}
	run(t, con, `for i in $(seq 100); do [ -b /dev/sda ] && [ -b /dev/vda ] && break; usleep 200000; done; `+
		`echo "serial-$(cat /sys/block/vda/serial)-$(tr -dc A-Z- </sys/block/sda/device/vpd_pg80)-seen"`, "serial-VIRTIO-V-SCSI-S-seen")

	t0 := time.Now()
	if err := v.HotplugDisks(ctx, nil, fds.take); err != nil {
		t.Fatal(err)
	}
	t.Logf("the guest released both disks in %v", time.Since(t0))
	if got := hotplugged(v); len(got) != 0 {
		t.Errorf("hotplugged after the detach: %v", got)
	}
	run(t, con, `for i in $(seq 50); do [ -b /dev/sda ] || [ -b /dev/vda ] || break; usleep 200000; done; echo "left-$(ls /sys/block | grep -E '^(sd|vd)' | tr '\n' ,)-end"`, "left--end")
}
