package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
)

// TestLauncherAPIMigratesAVM: two launchers, as on two nodes; the target is prepared through
// its API, the source migrates to it over the target directory's sockets, and the target
// then runs the guest while the source ends as migrated.
func TestLauncherAPIMigratesAVM(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	src, dst := startLauncher(t, time.Minute), startLauncher(t, 0)
	ctx := ctxFor(t, 3*time.Minute)
	spec := g.LauncherSpec("migrant", 128)
	if _, err := src.client.Migrate(ctx, &launcherapi.MigrateRequest{SocketPath: "/nowhere"}); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Errorf("migrate before sync: %v, want FailedPrecondition", err)
	}
	if _, err := src.client.Migrate(ctx, &launcherapi.MigrateRequest{SocketPath: "../escape.sock"}); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("migrate to a socket outside the VM directory: %v, want InvalidArgument", err)
	}
	if _, err := src.client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	con := testenv.DialConsole(t, qemuargs.NewLayout(src.dir).SerialSocket())
	if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	st, err := dst.client.PrepareMigrationTarget(ctx, &launcherapi.SyncRequest{Spec: spec})
	if err != nil || st.State != launcherapi.State_STATE_MIGRATING_IN {
		t.Fatalf("prepare target: %v %v", st, err)
	}
	if _, err := src.client.Migrate(ctx, &launcherapi.MigrateRequest{}); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("migrate without a socket: %v, want InvalidArgument", err)
	}
	if _, err := src.client.CancelMigration(ctx, &launcherapi.Empty{}); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Errorf("cancel with nothing migrating: %v, want FailedPrecondition", err)
	}
	l := qemuargs.NewLayout(dst.dir)
	if _, err := src.client.Migrate(ctx, &launcherapi.MigrateRequest{SocketPath: l.MigrationSocket(), CopyLocalDisks: true, DisksSocketPath: l.MigrationDisksSocket()}); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := src.client.Status(ctx, &launcherapi.Empty{})
		if err == nil && s.State == launcherapi.State_STATE_STOPPED {
			if s.ExitReason != launcherapi.ExitReason_EXIT_REASON_MIGRATED || s.Migration.GetState() != "completed" {
				t.Fatalf("source after the migration: %v", s)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("source status %v %v", s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		s, err := dst.client.Status(ctx, &launcherapi.Empty{})
		if err == nil && s.State == launcherapi.State_STATE_RUNNING && s.QmpStatus == "running" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("target status %v %v", s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	con2 := testenv.DialConsole(t, l.SerialSocket())
	if err := con2.Type("echo here-$((6*7))\n"); err != nil {
		t.Fatal(err)
	}
	if err := con2.WaitFor(ctx, "here-42"); err != nil {
		t.Fatal(err)
	}
}
