package server

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/fdpass"
)

type launcher struct {
	dir    string
	client launcherapi.LauncherClient
	done   chan struct{} // closed when Run has returned, with its error in err
	err    error
	cancel context.CancelFunc
}

// startLauncher runs the launcher's Run loop in-process on sockets in a temp directory.
func startLauncher(t *testing.T, linger time.Duration) *launcher {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vm")
	ctx, cancel := context.WithCancel(context.Background())
	l := &launcher{dir: dir, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(l.done)
		l.err = Run(ctx, RunOptions{Options: Options{Dir: dir}, StopGrace: 10 * time.Second, Linger: linger})
	}()
	sock := filepath.Join(dir, SocketName)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("launcher socket never appeared")
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	l.client = launcherapi.NewLauncherClient(conn)
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(60 * time.Second):
			t.Error("launcher did not stop")
		}
		conn.Close()
	})
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

func TestLauncherAPIDrivesARealVM(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	l := startLauncher(t, 0)
	ctx := ctxFor(t, 3*time.Minute)

	st, err := l.client.Status(ctx, &launcherapi.Empty{})
	if err != nil || st.State != launcherapi.State_STATE_PENDING {
		t.Fatalf("status before sync: %v %v", st, err)
	}
	_, err = l.client.Pause(ctx, &launcherapi.Empty{})
	wantCode(t, err, codes.FailedPrecondition)

	spec := g.LauncherSpec("grpc", 256)
	spec.Devices.MemBalloon = true
	const mac = "02:00:00:ab:cd:ef"
	if os.Geteuid() == 0 {
		// The node agent's side: open the tap and hand the descriptor over the fd socket.
		tap := testenv.OpenTap(t, "qvtg"+strings.Repeat("0", 1))
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(l.dir, FDSocketName), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		if err := fdpass.SendAll(conn, map[string]*os.File{"tap-default": tap}); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		spec.Interfaces = []*launcherapi.Interface{{Name: "default", MacAddress: mac, TapFdName: "tap-default"}}
	}

	events, err := l.client.Events(ctx, &launcherapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	st, err = l.client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != launcherapi.State_STATE_RUNNING || st.QmpStatus != "running" || st.QemuPid == 0 {
		t.Fatalf("after sync: %v", st)
	}
	// Sync is idempotent for the same spec and refuses another.
	if _, err := l.client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec}); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	other := proto.Clone(spec).(*launcherapi.VMSpec)
	other.MemoryBytes = 512 << 20
	_, err = l.client.Sync(ctx, &launcherapi.SyncRequest{Spec: other})
	wantCode(t, err, codes.FailedPrecondition)

	con := testenv.DialConsole(t, filepath.Join(l.dir, "serial0.sock"))
	if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	if spec.Interfaces != nil {
		con.Type("cat /sys/class/net/eth0/address\n")
		if err := con.WaitFor(ctx, mac); err != nil {
			t.Fatal(err)
		}
	}

	if st, err = l.client.Pause(ctx, &launcherapi.Empty{}); err != nil || st.State != launcherapi.State_STATE_PAUSED || st.QmpStatus != "paused" {
		t.Fatalf("pause: %v %v", st, err)
	}
	if st, err = l.client.Unpause(ctx, &launcherapi.Empty{}); err != nil || st.State != launcherapi.State_STATE_RUNNING || st.QmpStatus != "running" {
		t.Fatalf("unpause: %v %v", st, err)
	}

	stats, err := l.client.Stats(ctx, &launcherapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Vcpus) != 1 || stats.Vcpus[0].RunNs == 0 || len(stats.Block) != 1 || stats.Block[0].ReadBytes == 0 {
		t.Fatalf("stats: %v", stats)
	}

	// Reset reboots the guest: it prints its boot marker a second time.
	if _, err := l.client.Reset(ctx, &launcherapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); strings.Count(con.Output(), testenv.MarkerBooted) < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("guest did not reboot after reset; console:\n%s", con.Output())
		}
	}
	if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the guest's power-button handler starts just after the prompt

	st, err = l.client.Shutdown(ctx, &launcherapi.ShutdownRequest{GracePeriodSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != launcherapi.State_STATE_STOPPED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_SHUTDOWN {
		t.Fatalf("after shutdown: %v", st)
	}

	var seen []launcherapi.State
	var sawReset bool
	for {
		ev, err := events.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		seen = append(seen, ev.State)
		sawReset = sawReset || ev.QmpEvent == "RESET"
	}
	for _, want := range []launcherapi.State{launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED, launcherapi.State_STATE_SHUTTING_DOWN, launcherapi.State_STATE_STOPPED} {
		if !containsState(seen, want) {
			t.Errorf("event stream %v lacks %v", seen, want)
		}
	}
	if !sawReset {
		t.Error("no RESET event in the stream")
	}
	select {
	case <-l.done:
		if l.err != nil {
			t.Fatalf("launcher: %v", l.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("launcher kept running after its VM stopped")
	}
}

func TestLauncherRefusesInvalidSpec(t *testing.T) {
	l := startLauncher(t, 5*time.Second)
	ctx := ctxFor(t, 30*time.Second)
	_, err := l.client.Sync(ctx, &launcherapi.SyncRequest{Spec: &launcherapi.VMSpec{Name: "bad", MemoryBytes: 64 << 20,
		Disks: []*launcherapi.Disk{{Name: "d", Bus: launcherapi.Bus_BUS_VIRTIO}}}})
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(status.Convert(err).Message(), "spec.disks[0].source") {
		t.Errorf("message does not name the field: %v", err)
	}
	_, err = l.client.Shutdown(ctx, &launcherapi.ShutdownRequest{GracePeriodSeconds: -1})
	wantCode(t, err, codes.InvalidArgument)
	st, err := l.client.Status(ctx, &launcherapi.Empty{})
	if err != nil || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_FAILED_START {
		t.Fatalf("status: %v %v", st, err)
	}
}

func containsState(s []launcherapi.State, want launcherapi.State) bool {
	for _, x := range s {
		if x == want {
			return true
		}
	}
	return false
}
