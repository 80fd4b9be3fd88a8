package migrationproxy

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/vm"
)

// TestQEMUMigratesThroughTheProxy: a real guest migrates, RAM and its containerDisk overlay,
// with both streams through a source and a target proxy and TLS between them, the launchers'
// QEMUs touching only unix sockets in their own directories.
func TestQEMUMigratesThroughTheProxy(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	spec := g.LauncherSpec("proxied", 128)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := vm.New(vm.Config{Dir: filepath.Join(t.TempDir(), "source")})
	dst := vm.New(vm.Config{Dir: filepath.Join(t.TempDir(), "target")})
	for _, v := range []*vm.VM{src, dst} {
		t.Cleanup(func() { _ = v.Kill(context.Background()) })
	}
	if err := src.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	con := testenv.DialConsole(t, src.Layout().SerialSocket())
	if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	if err := con.Type("echo through-$((6*7)) >/run/marker\n"); err != nil {
		t.Fatal(err)
	}
	if err := dst.StartIncoming(ctx, spec); err != nil {
		t.Fatal(err)
	}

	certs := newNodeCerts(t)
	var sockets [2]string
	for i, launcherSock := range []string{dst.Layout().MigrationSocket(), dst.Layout().MigrationDisksSocket()} {
		tgt, err := ListenTarget("127.0.0.1:0", certs.targetConfig("node-b"), "node-a", DialUnix(launcherSock), testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		sockets[i] = filepath.Join(src.Layout().Dir, filepath.Base(launcherSock)+".proxy")
		l, err := net.Listen("unix", sockets[i])
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSource(l, tgt.Addr().String(), "node-b", certs.sourceConfig("node-a"), testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	req := &launcherapi.MigrateRequest{SocketPath: sockets[0], CopyLocalDisks: true, DisksSocketPath: sockets[1]}
	if err := src.Migrate(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.Exited():
	case <-ctx.Done():
		t.Fatalf("the source did not end: %v", src.Status())
	}
	if st := src.Status(); st.ExitReason != launcherapi.ExitReason_EXIT_REASON_MIGRATED {
		t.Fatalf("source status %v", st)
	}
	for dst.Status().State != launcherapi.State_STATE_RUNNING {
		if ctx.Err() != nil {
			t.Fatalf("target status %v", dst.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	con2 := testenv.DialConsole(t, dst.Layout().SerialSocket())
	if err := con2.Type("cat /run/marker\n"); err != nil {
		t.Fatal(err)
	}
	if err := con2.WaitFor(ctx, "through-42"); err != nil {
		t.Fatal(err)
	}
}
