package handler

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/server"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// echoSocket serves a unix socket at p that echoes every connection, as a serial console in
// echo mode does.
func echoSocket(t *testing.T, p string) {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// echoes checks that s answers what is written to it.
func echoes(t *testing.T, s io.ReadWriter, msg string) {
	t.Helper()
	if _, err := io.WriteString(s, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(s, got)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || string(got) != msg {
			t.Fatalf("echo %q %v, want %q", got, err, msg)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no echo of %q", msg)
	}
}

// ends checks that the server closes s: reading it fails.
func ends(t *testing.T, s io.Reader, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, s)
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s is still open", what)
	}
}

func TestASecondConsoleTakesOver(t *testing.T) {
	h, dir, _ := runningVM(t)
	echoSocket(t, filepath.Join(dir, serialSocket))
	env := nodeapitest.Start(t, h.Backend())
	vmi := nodeapi.VMI{Namespace: "default", Name: "vm1"}
	ctx := context.Background()

	first, err := env.Client.Console(ctx, env.Endpoint, vmi)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	echoes(t, first, "one")
	// As KubeVirt's virt-handler: the new console closes the old one.
	second, err := env.Client.Console(ctx, env.Endpoint, vmi)
	if err != nil {
		t.Fatalf("second console: %v", err)
	}
	defer second.Close()
	ends(t, first, "the first console")
	echoes(t, second, "two")
	if n := len(h.stateByName("default", "vm1").sessions); n != 1 {
		t.Errorf("%d sessions recorded, want 1", n)
	}
}

func TestASecondVNCTakesOverUnlessThePreservedOneIsOpen(t *testing.T) {
	h, dir, _ := runningVM(t)
	echoSocket(t, filepath.Join(dir, vncSocket))
	env := nodeapitest.Start(t, h.Backend())
	vmi := nodeapi.VMI{Namespace: "default", Name: "vm1"}
	ctx := context.Background()

	first, err := env.Client.VNC(ctx, env.Endpoint, vmi, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	echoes(t, first, "RFB")
	if _, err := env.Client.VNC(ctx, env.Endpoint, vmi, true); !errors.Is(err, nodeapi.ErrSessionBusy) {
		t.Fatalf("VNC with preserveSession while one is open: %v, want session busy", err)
	}
	echoes(t, first, "still mine")
	second, err := env.Client.VNC(ctx, env.Endpoint, vmi, false)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ends(t, first, "the first VNC session")
	echoes(t, second, "RFB")
}

func TestPortForwardsPerVMIAreCapped(t *testing.T) {
	h, _, _ := runningVM(t)
	h.opts.MaxPortForwardsPerVMI = 2
	guest, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	st := h.stateByName("default", "vm1")
	st.nics = map[string]*PlumbedNIC{"default": {GuestAddr: "127.0.0.1"}}
	port := guest.Addr().(*net.TCPAddr).Port
	env := nodeapitest.Start(t, h.Backend())
	vmi := nodeapi.VMI{Namespace: "default", Name: "vm1"}
	ctx := context.Background()
	var open []io.ReadWriteCloser
	for i := 0; i < 2; i++ {
		s, err := env.Client.PortForward(ctx, env.Endpoint, vmi, port, "tcp")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		echoes(t, s, "hello "+strconv.Itoa(i))
		open = append(open, s)
	}
	_, err = env.Client.PortForward(ctx, env.Endpoint, vmi, port, "tcp")
	var ne *nodeapi.Error
	if !errors.Is(err, nodeapi.ErrTooManyRequests) || !errors.As(err, &ne) || ne.Code != 429 {
		t.Fatalf("a third forward: %v, want 429", err)
	}
	open[0].Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := env.Client.PortForward(ctx, env.Endpoint, vmi, port, "tcp")
		if err == nil {
			echoes(t, s, "again")
			s.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed forward's place never freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthyLauncher answers at once, as a healthy launcher does.
type healthyLauncher struct {
	launcherapi.UnimplementedLauncherServer
}

var runningStatus = &launcherapi.StatusResponse{State: launcherapi.State_STATE_RUNNING}

func (healthyLauncher) Status(context.Context, *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return runningStatus, nil
}

func (healthyLauncher) Pause(context.Context, *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return &launcherapi.StatusResponse{State: launcherapi.State_STATE_PAUSED}, nil
}

func (healthyLauncher) Stats(context.Context, *launcherapi.Empty) (*launcherapi.StatsResponse, error) {
	return &launcherapi.StatsResponse{}, nil
}

func (healthyLauncher) Screenshot(context.Context, *launcherapi.Empty) (*launcherapi.ScreenshotResponse, error) {
	return &launcherapi.ScreenshotResponse{Png: []byte("\x89PNG")}, nil
}

func (healthyLauncher) Events(_ *launcherapi.Empty, s grpc.ServerStreamingServer[launcherapi.Event]) error {
	<-s.Context().Done()
	return nil
}

// stuckLauncher is a launcher whose calls never finish (its QEMU monitor hangs, say): each
// waits for the caller to give up. Every call is reported on entered.
type stuckLauncher struct {
	launcherapi.UnimplementedLauncherServer
	entered chan string
}

func (l stuckLauncher) wait(ctx context.Context, call string) error {
	select {
	case l.entered <- call:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

func (l stuckLauncher) Status(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return nil, l.wait(ctx, "status")
}

func (l stuckLauncher) Pause(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatusResponse, error) {
	return nil, l.wait(ctx, "pause")
}

func (l stuckLauncher) Stats(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.StatsResponse, error) {
	return nil, l.wait(ctx, "stats")
}

func (l stuckLauncher) Screenshot(ctx context.Context, _ *launcherapi.Empty) (*launcherapi.ScreenshotResponse, error) {
	return nil, l.wait(ctx, "screenshot")
}

// serveLauncher serves ls on the launcher socket of st's directory.
func serveLauncher(t *testing.T, st *vmState, ls launcherapi.LauncherServer) {
	t.Helper()
	gs := grpc.NewServer()
	launcherapi.RegisterLauncherServer(gs, ls)
	l, err := net.Listen("unix", filepath.Join(dirPath(t, st), server.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
}

func TestAHangingLauncherStallsOnlyItsOwnVM(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	vmiOf := func(name string) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01"}}
	}
	a, b := vmiOf("a"), vmiOf("b")
	c := testClient(t, a, b, testLauncherPod(a), testLauncherPod(b)).WithStatusSubresource(&v1.VirtualMachineInstance{}).Build()
	const callTimeout = 2 * time.Second
	h := New(c, Options{NodeName: "node01", KubeletPodsDir: shortTempDir(t), LauncherUID: os.Geteuid(), LauncherCallTimeout: callTimeout})

	add := func(vmi *v1.VirtualMachineInstance) *vmState {
		st := h.state(vmi, true)
		if err := os.MkdirAll(dirPath(t, st), 0o755); err != nil {
			t.Fatal(err)
		}
		return st
	}
	stA, stB := add(a), add(b)
	stuck := stuckLauncher{entered: make(chan string, 16)}
	serveLauncher(t, stA, stuck)
	serveLauncher(t, stB, healthyLauncher{})
	echoSocket(t, filepath.Join(dirPath(t, stB), serialSocket))
	for _, st := range []*vmState{stA, stB} {
		lc, err := dialLauncher(st.dir)
		if err != nil {
			t.Fatal(err)
		}
		st.lc, st.last = lc, runningStatus
	}
	t.Cleanup(func() { stA.close(); stB.close() })

	env := nodeapitest.Start(t, h.Backend())
	ctx := context.Background()
	vmiA, vmiB := nodeapi.VMI{Namespace: "default", Name: "a"}, nodeapi.VMI{Namespace: "default", Name: "b"}

	// A's launcher is asked for a command and a screenshot.
	aFailed := make(chan error, 2)
	go func() { aFailed <- env.Client.Command(ctx, env.Endpoint, vmiA, nodeapi.Pause) }()
	go func() {
		_, err := env.Client.Screenshot(ctx, env.Endpoint, vmiA)
		aFailed <- err
	}()
	for i := 0; i < 2; i++ {
		select {
		case <-stuck.entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the requests never reached A's launcher")
		}
	}

	// Meanwhile B answers its command, screenshot and console.
	if err := env.Client.Command(ctx, env.Endpoint, vmiB, nodeapi.Pause); err != nil {
		t.Errorf("B's pause while A's launcher hangs: %v", err)
	}
	if png, err := env.Client.Screenshot(ctx, env.Endpoint, vmiB); err != nil || string(png) != "\x89PNG" {
		t.Errorf("B's screenshot while A's launcher hangs: %q %v", png, err)
	}
	con, err := env.Client.Console(ctx, env.Endpoint, vmiB)
	if err != nil {
		t.Fatalf("B's console while A's launcher hangs: %v", err)
	}
	echoes(t, con, "b's console")
	con.Close()

	// A's requests fail on their own deadline instead of hanging until virt-api gives up.
	for i := 0; i < 2; i++ {
		select {
		case err := <-aFailed:
			if !errors.Is(err, nodeapi.ErrUnavailable) {
				t.Errorf("A's request: %v, want unavailable", err)
			}
		case <-time.After(10*callTimeout + 20*time.Second):
			t.Fatal("a request to A's hanging launcher never returned")
		}
	}

	// A is reconciled and its statistics polled, both waiting for its launcher; B's status
	// and statistics are still brought up to date.
	aReconciled := make(chan error, 1)
	go func() {
		_, err := h.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)})
		aReconciled <- err
	}()
	pollDone := make(chan struct{})
	go func() {
		h.pollStats(ctx)
		close(pollDone)
	}()
	if _, err := h.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
		t.Errorf("reconciling B while A's launcher hangs: %v", err)
	}
	got := &v1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) == 0 {
		t.Errorf("B's status was not written: %+v", got.Status)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stB.mu.Lock()
		refreshed := stB.stats != nil
		stB.mu.Unlock()
		if refreshed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's statistics were never refreshed")
		}
	}
	select {
	case err := <-aReconciled:
		if err != nil {
			t.Errorf("reconciling A: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("reconciling A never returned")
	}
	<-pollDone
}
