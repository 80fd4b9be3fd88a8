package vm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// migrationPair boots a source guest with a containerDisk and prepares a target for it, each
// QEMU in a directory of its own as on two nodes.
func migrationPair(t *testing.T, name string) (src, dst *VM, con *testenv.Console) {
	t.Helper()
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	spec := guestSpec(g, name)
	spec.Disks = []*launcherapi.Disk{{Name: "rootdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{
		ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: g.Disk, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}}
	src, con = startVM(t, spec, nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	dst = New(Config{Dir: filepath.Join(t.TempDir(), "target")})
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(dst.qemuLogPath())
			t.Logf("target qemu.log:\n%s", log)
		}
		_ = dst.Kill(context.Background())
	})
	if err := dst.StartIncoming(within(t, time.Minute), spec); err != nil {
		t.Fatalf("target: %v", err)
	}
	if st := dst.Status(); st.State != launcherapi.State_STATE_MIGRATING_IN {
		t.Fatalf("target status %v, want MIGRATING_IN", st)
	}
	return src, dst, con
}

// TestLiveMigrationKeepsTheGuest: a guest's RAM (a marker in its tmpfs), its clock and its disk
// writes move to the target; the source QEMU ends as migrated, the target runs the guest.
func TestLiveMigrationKeepsTheGuest(t *testing.T) {
	src, dst, con := migrationPair(t, "mover")
	// A marker in RAM, and one written to the disk (past its filesystem's data, synced).
	run(t, con, "echo moved-$((6*7)) >/run/marker; echo "+diskMarker+" | dd of=/dev/vda bs=512 seek=60000 conv=fsync 2>/dev/null; echo wrote-$((6*7))", "wrote-42")
	before := guestUptime(t, con)

	// QEMU stops the vCPUs for the last stage of the move: the source must not report a pause.
	events, unsubscribe := src.Subscribe()
	defer unsubscribe()
	var states []launcherapi.State
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for ev := range events {
			states = append(states, ev.State)
		}
	}()
	req := &launcherapi.MigrateRequest{SocketPath: dst.Layout().MigrationSocket(), CopyLocalDisks: true, DisksSocketPath: dst.Layout().MigrationDisksSocket()}
	if err := src.Migrate(within(t, 10*time.Second), req); err != nil {
		t.Fatal(err)
	}
	if err := src.Migrate(within(t, 10*time.Second), &launcherapi.MigrateRequest{SocketPath: dst.Layout().MigrationSocket()}); !errors.Is(err, ErrMigrating) && !errors.Is(err, ErrNotRunning) {
		t.Errorf("a second migration: %v, want ErrMigrating", err)
	}
	select {
	case <-src.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the source did not end; its migration: %v", src.Status().Migration)
	}
	if m := src.Status().Migration; m.State != qmp.MigrationCompleted {
		t.Fatalf("migration %v", m)
	}
	st := src.Status()
	if st.State != launcherapi.State_STATE_STOPPED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_MIGRATED {
		t.Fatalf("source status %v, want STOPPED, MIGRATED", st)
	}
	<-seen
	if slices.Contains(states, launcherapi.State_STATE_PAUSED) {
		t.Errorf("the source reported the states %v during its migration: a pause", states)
	}
	m := st.Migration
	if m.State != qmp.MigrationCompleted || !m.Outgoing || m.TransferredBytes == 0 || m.EndUnixNano < m.StartUnixNano || m.Mode != ModePreCopy {
		t.Errorf("source migration status %v", m)
	}
	if m.DiskTotalBytes == 0 || m.DiskTransferredBytes == 0 || m.MemoryBytesPerSecond == 0 {
		t.Errorf("the source's migration status lacks the disk copy or the memory rate: %v", m)
	}
	ctx := within(t, time.Minute)
	for dst.Status().State != launcherapi.State_STATE_RUNNING {
		if ctx.Err() != nil {
			t.Fatalf("target status %v, want RUNNING", dst.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if q, err := dst.QMPStatus(ctx); err != nil || q != qmp.StatusRunning {
		t.Fatalf("target QMP status %q %v", q, err)
	}
	t.Logf("migrated %d bytes in %s, downtime %d ms", m.TransferredBytes, time.Duration(m.EndUnixNano-m.StartUnixNano), m.DowntimeMs)

	con2 := testenv.DialConsole(t, dst.Layout().SerialSocket())
	if err := con2.Type("\n"); err != nil {
		t.Fatal(err)
	}
	run(t, con2, "cat /run/marker", "moved-42")
	if after := guestUptime(t, con2); after <= before {
		t.Errorf("the guest's uptime went from %.2f to %.2f s: it restarted", before, after)
	}
	// The disk write is in the target's own overlay.
	if err := dst.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	overlay := dst.Layout().DiskImage(dst.Spec().Disks[0]).Path
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", overlay, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	b, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b[60000*512 : 60000*512+len(diskMarker)]); got != diskMarker {
		t.Errorf("the target's disk holds %q where the guest wrote %q before the migration", got, diskMarker)
	}
}

const diskMarker = "qvirt-disk-moved"

// TestAMigrationThatCannotConvergeSwitchesToPostCopy: a guest rewriting 64 MiB of its RAM
// under an 8 MiB/s limit does not converge by the completion timeout; allowed post-copy, the
// migration switches over and completes, and the guest runs on the target with its RAM.
func TestAMigrationThatCannotConvergeSwitchesToPostCopy(t *testing.T) {
	src, dst, con := migrationPair(t, "postcopy")
	run(t, con, "echo kept-$((6*7)) >/run/marker; yes qvirt-dirty-pages | head -c 4194304 >/run/src; echo ready-$((6*7))", "ready-42")
	if err := con.Type(dirtyLoop); err != nil {
		t.Fatal(err)
	}
	req := &launcherapi.MigrateRequest{SocketPath: dst.Layout().MigrationSocket(), CopyLocalDisks: true, DisksSocketPath: dst.Layout().MigrationDisksSocket(),
		BandwidthBytesPerSecond: 8 << 20, AllowPostCopy: true, CompletionTimeoutSeconds: 5}
	if err := src.Migrate(within(t, 10*time.Second), req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the source did not end; its migration: %v", src.Status().Migration)
	}
	if m := src.Status().Migration; m.State != qmp.MigrationCompleted || m.Mode != ModePostCopy {
		t.Fatalf("migration %v, want completed in post-copy", m)
	}
	ctx := within(t, time.Minute)
	for dst.Status().State != launcherapi.State_STATE_RUNNING {
		if ctx.Err() != nil {
			t.Fatalf("target status %v", dst.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	con2 := testenv.DialConsole(t, dst.Layout().SerialSocket())
	if err := con2.Type("\n"); err != nil {
		t.Fatal(err)
	}
	run(t, con2, "cat /run/marker", "kept-42")
}

// dirtyLoop keeps rewriting 64 MiB of the guest's RAM with non-zero data (QEMU sends zero
// pages as markers), copied from /run/src at memory speed.
const dirtyLoop = "while :; do for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do cat /run/src; done >/run/dirty; done &\n"

// TestMigrationCancelKeepsTheGuestOnTheSource: a migration throttled to a crawl is cancelled;
// the source keeps running the guest and the target is left to be discarded.
func TestMigrationCancelKeepsTheGuestOnTheSource(t *testing.T) {
	src, dst, con := migrationPair(t, "stayer")
	if err := src.CancelMigration(context.Background()); !errors.Is(err, ErrNoMigration) {
		t.Errorf("cancel with nothing migrating: %v, want ErrNoMigration", err)
	}
	req := &launcherapi.MigrateRequest{SocketPath: dst.Layout().MigrationSocket(), BandwidthBytesPerSecond: 1 << 20}
	if err := src.Migrate(within(t, 10*time.Second), req); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := src.CancelMigration(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := within(t, time.Minute)
	for {
		m := src.Status().Migration
		if m.State == qmp.MigrationCancelled && m.EndUnixNano != 0 {
			if !m.AbortRequested || !strings.Contains(m.Message, "cancelled on request") {
				t.Errorf("cancelled migration status %v", m)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("migration status %v, want cancelled", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := src.Status(); st.State != launcherapi.State_STATE_RUNNING {
		t.Fatalf("source status %v, want RUNNING", st)
	}
	run(t, con, "echo still-$((6*7))", "still-42")
}

// TestMigrationWithoutProgressIsAborted: a target that accepts the stream and never reads it
// stalls the migration once the socket's buffers are full, and the progress timeout aborts it.
func TestMigrationWithoutProgressIsAborted(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	src, con := startVM(t, guestSpec(g, "stuck"), nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "deaf.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}()
	req := &launcherapi.MigrateRequest{SocketPath: sock, ProgressTimeoutSeconds: 2}
	if err := src.Migrate(within(t, 10*time.Second), req); err != nil {
		t.Fatal(err)
	}
	ctx := within(t, time.Minute)
	for {
		m := src.Status().Migration
		if m.EndUnixNano != 0 {
			if m.State != qmp.MigrationCancelled || !strings.Contains(m.Message, "progress timeout") {
				t.Errorf("migration status %v, want cancelled by the progress timeout", m)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("migration status %v, want it aborted", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	run(t, con, "echo alive-$((6*7))", "alive-42")
}

var uptimeReads int

// guestUptime reads /proc/uptime at the guest's shell. The marker is computed by the guest's
// shell, so the echo of the typed command never matches it, nor does an earlier reading.
func guestUptime(t *testing.T, con *testenv.Console) float64 {
	t.Helper()
	uptimeReads++
	n := 1000 + uptimeReads
	if err := con.Type(fmt.Sprintf("echo U$((%d))=$(cut -d' ' -f1 /proc/uptime)=\n", n)); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(fmt.Sprintf(`U%d=([0-9.]+)=`, n))
	ctx := within(t, 30*time.Second)
	for {
		if m := re.FindStringSubmatch(con.Output()); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if ctx.Err() != nil {
			t.Fatalf("no uptime on the console:\n%s", con.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
