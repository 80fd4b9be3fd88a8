package server

import (
	"debug/elf"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/fdpass"
)

// handIn passes files to the launcher over its fd socket, as the node agent does.
func (l *launcher) handIn(t *testing.T, files map[string]*os.File) {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(l.dir, FDSocketName), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := fdpass.SendAll(conn, files); err != nil {
		t.Fatal(err)
	}
}

func openFile(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "file"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestHotplugAndMemoryDumpOverTheAPI: descriptors handed in on the fd socket become a
// hotplugged disk and a memory dump's target, each used once; the answers and Status report
// both.
func TestHotplugAndMemoryDumpOverTheAPI(t *testing.T) {
	testenv.RequireQEMU(t)
	l := startLauncher(t, 0)
	ctx := ctxFor(t, 2*time.Minute)
	_, err := l.client.HotplugDisks(ctx, &launcherapi.HotplugDisksRequest{})
	wantCode(t, err, codes.FailedPrecondition)

	spec := &launcherapi.VMSpec{Namespace: "test", Name: "hotplug-api", MachineType: "q35", Accel: launcherapi.Accel_ACCEL_TCG,
		Cpu: &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1}, MemoryBytes: 64 << 20, Acpi: true,
		Hotplug: &launcherapi.Hotplug{PcieRootPorts: 1}}
	if _, err := l.client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	dump := openFile(t, 0)
	l.handIn(t, map[string]*os.File{"disk-data": openFile(t, 4<<20), "dump": dump})

	disk := &launcherapi.Disk{Name: "data", Bus: launcherapi.Bus_BUS_SCSI, Serial: "D1",
		Source: &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: "disk-data"}}}
	st, err := l.client.HotplugDisks(ctx, &launcherapi.HotplugDisksRequest{Disks: []*launcherapi.Disk{disk}})
	if err != nil {
		t.Fatal(err)
	}
	if hd := st.HotpluggedDisks; len(hd) != 1 || hd[0].Name != "data" || hd[0].Target != "sda" {
		t.Errorf("hotplugged disks in the answer: %v", hd)
	}
	if st, err := l.client.Status(ctx, &launcherapi.Empty{}); err != nil || len(st.HotpluggedDisks) != 1 {
		t.Errorf("status: %v %v", st, err)
	}
	// The descriptor went with the disk: another disk cannot use it again.
	again := &launcherapi.Disk{Name: "again", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: "disk-data"}}}
	_, err = l.client.HotplugDisks(ctx, &launcherapi.HotplugDisksRequest{Disks: []*launcherapi.Disk{disk, again}})
	wantCode(t, err, codes.NotFound)
	sata := &launcherapi.Disk{Name: "sata", Bus: launcherapi.Bus_BUS_SATA, Source: &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: "disk-sata"}}}
	_, err = l.client.HotplugDisks(ctx, &launcherapi.HotplugDisksRequest{Disks: []*launcherapi.Disk{disk, sata}})
	wantCode(t, err, codes.InvalidArgument)

	_, err = l.client.DumpMemory(ctx, &launcherapi.DumpMemoryRequest{FdName: "nothing", Id: "x"})
	wantCode(t, err, codes.NotFound)
	if st, err = l.client.DumpMemory(ctx, &launcherapi.DumpMemoryRequest{FdName: "dump", Id: "dump-1"}); err != nil {
		t.Fatal(err)
	}
	if m := st.MemoryDump; m.GetId() != "dump-1" || m.StartUnixNano == 0 {
		t.Errorf("memory dump in the answer: %v", m)
	}
	// QEMU reports the dump completed just before it resumes the guest it stopped for it.
	resumeBy := time.Now().Add(time.Minute)
	for st.MemoryDump.GetState() == "active" || (st.QmpStatus == "save-vm" && time.Now().Before(resumeBy)) {
		time.Sleep(20 * time.Millisecond)
		if st, err = l.client.Status(ctx, &launcherapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if m := st.MemoryDump; m.GetState() != "completed" || m.WrittenBytes < 64<<20 || st.QmpStatus != "running" || st.State != launcherapi.State_STATE_RUNNING {
		t.Errorf("after the dump: %v", st)
	}
	if core, err := elf.NewFile(dump); err != nil || core.Type != elf.ET_CORE {
		t.Errorf("the dump is no ELF core: %v", err)
	}

	st, err = l.client.HotplugDisks(ctx, &launcherapi.HotplugDisksRequest{})
	if err != nil || len(st.HotpluggedDisks) != 0 {
		t.Fatalf("detaching the disk: %v %v", st, err)
	}
	if st, err = l.client.Kill(ctx, &launcherapi.Empty{}); err != nil || st.State != launcherapi.State_STATE_STOPPED {
		t.Fatalf("kill: %v %v", st, err)
	}
}
