package vm

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// BenchmarkMigration migrates a 256 MiB guest between two QEMUs on this machine, over unix
// sockets, with its containerDisk overlay mirrored along, and reports for each case:
//   - total-ms: from Migrate to the end QEMU reports (the disk mirror's sync included);
//   - downtime-ms: the switchover downtime QEMU reports (0 when it did not complete);
//   - completed: 1 if the guest moved, 0 if the migration was aborted;
//   - dirty-pages/s-max: the highest dirty page rate QEMU measured while it ran.
//
// "idle" guests only run their shell. "dirty" guests keep rewriting 64 MiB of their RAM with
// non-zero data (dirtyLoop) while the migration is limited to 8 MiB/s; the completion timeout
// is 20 s, past which pre-copy aborts, auto-converge keeps throttling the guest's vCPU and
// post-copy switches over. Guests run under TCG on a shared machine: compare the cases of one
// run.
func BenchmarkMigration(b *testing.B) {
	testenv.RequireQEMU(b)
	g := testenv.RequireGuest(b)
	cases := []struct {
		name                     string
		dirty, converge, postCpy bool
	}{
		{"idle/pre-copy", false, false, false},
		{"idle/auto-converge", false, true, false},
		{"idle/post-copy", false, false, true},
		{"dirty/pre-copy", true, false, false},
		{"dirty/auto-converge", true, true, false},
		{"dirty/post-copy", true, false, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			spec := guestSpec(g, "bench")
			spec.Devices = &launcherapi.Devices{SerialConsole: true}
			spec.Disks = []*launcherapi.Disk{{Name: "rootdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{
				ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: g.Disk, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			src := New(Config{Dir: filepath.Join(b.TempDir(), "source")})
			dst := New(Config{Dir: filepath.Join(b.TempDir(), "target")})
			defer func() {
				_ = src.Kill(context.Background())
				_ = dst.Kill(context.Background())
			}()
			if err := src.Start(ctx, spec); err != nil {
				b.Fatal(err)
			}
			con := testenv.DialConsole(b, src.Layout().SerialSocket())
			if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
				b.Fatal(err)
			}
			req := &launcherapi.MigrateRequest{SocketPath: dst.Layout().MigrationSocket(), CopyLocalDisks: true, DisksSocketPath: dst.Layout().MigrationDisksSocket(),
				AllowAutoConverge: tc.converge, AllowPostCopy: tc.postCpy, CompletionTimeoutSeconds: 20}
			if tc.dirty {
				req.BandwidthBytesPerSecond = 8 << 20
				if err := con.Type("yes qvirt-dirty-pages | head -c 4194304 >/run/src; " + dirtyLoop); err != nil {
					b.Fatal(err)
				}
				time.Sleep(5 * time.Second)
			}
			if err := dst.StartIncoming(ctx, spec); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := src.Migrate(ctx, req); err != nil {
				b.Fatal(err)
			}
			var m *launcherapi.MigrationStatus
			var dirtyMax uint64
			for {
				m = src.Status().Migration
				dirtyMax = max(dirtyMax, m.DirtyPagesRate)
				if m.EndUnixNano != 0 && (m.State == qmp.MigrationCompleted || !migrating(m)) {
					break
				}
				if ctx.Err() != nil {
					b.Fatalf("migration did not end: %v", m)
				}
				time.Sleep(20 * time.Millisecond)
			}
			b.StopTimer()
			completed := 0.0
			if m.State == qmp.MigrationCompleted {
				completed = 1
			}
			b.ReportMetric(float64(m.EndUnixNano-m.StartUnixNano)/1e6, "total-ms")
			b.ReportMetric(float64(m.DowntimeMs), "downtime-ms")
			b.ReportMetric(completed, "completed")
			b.ReportMetric(float64(dirtyMax), "dirty-pages/s-max")
			b.Logf("%s: %s, mode %s, %d MiB moved, %s", tc.name, m.State, m.Mode, m.TransferredBytes>>20, m.Message)
		})
	}
}
