package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// kubelet is the kubelet's registration service on a real socket, as the plugins dial it.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	mu   sync.Mutex
	reqs []*pluginapi.RegisterRequest
	got  chan struct{}
}

func (k *kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.reqs = append(k.reqs, r)
	k.mu.Unlock()
	k.got <- struct{}{}
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{got: make(chan struct{}, 16)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return k
}

func (k *kubelet) waitRegistered(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case <-k.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin never registered")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reqs[len(k.reqs)-1]
}

func recvHealth(t *testing.T, s pluginapi.DevicePlugin_ListAndWatchClient, count int) string {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != count {
		t.Fatalf("%d units, want %d", len(r.Devices), count)
	}
	seen := map[string]bool{}
	for _, d := range r.Devices {
		if d.Health != r.Devices[0].Health {
			t.Fatalf("units differ in health: %v", r.Devices)
		}
		if seen[d.ID] {
			t.Fatalf("unit %s listed twice", d.ID)
		}
		seen[d.ID] = true
	}
	return r.Devices[0].Health
}

// TestPluginRegistersFollowsTheDeviceAndComesBack drives a plugin as the kubelet does: it
// registers, lists units whose health follows the device node, allocates the device to every
// container, registers again after the kubelet wiped its socket, and goes away when the device
// is no longer offered.
func TestPluginRegistersFollowsTheDeviceAndComesBack(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	devPath := filepath.Join(t.TempDir(), "kvm")
	dev := Device{Name: "kvm", Path: devPath}
	var offered atomic.Bool
	offered.Store(true)
	m := NewManager(Options{Dir: dir, Count: 5, Poll: 20 * time.Millisecond, Log: testr.New(t)}, func() []Device {
		if offered.Load() {
			return []Device{dev}
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	req := k.waitRegistered(t)
	if req.Version != pluginapi.Version || req.ResourceName != "devices.kubevirt.io/kvm" || req.Endpoint != "kubevirt-kvm.sock" {
		t.Fatalf("registered %+v", req)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dp := pluginapi.NewDevicePluginClient(conn)
	watch, err := dp.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if h := recvHealth(t, watch, 5); h != pluginapi.Unhealthy {
		t.Fatalf("no device node, units %s", h)
	}
	if err := os.WriteFile(devPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if h := recvHealth(t, watch, 5); h != pluginapi.Healthy {
		t.Fatalf("device node present, units %s", h)
	}
	if err := os.Remove(devPath); err != nil {
		t.Fatal(err)
	}
	if h := recvHealth(t, watch, 5); h != pluginapi.Unhealthy {
		t.Fatalf("device node removed, units %s", h)
	}

	alloc, err := dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"kvm0"}}, {DevicesIds: []string{"kvm3"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(alloc.ContainerResponses) != 2 {
		t.Fatalf("%d container responses for 2 containers", len(alloc.ContainerResponses))
	}
	for _, cr := range alloc.ContainerResponses {
		if len(cr.Devices) != 1 || cr.Devices[0].HostPath != devPath || cr.Devices[0].ContainerPath != devPath || cr.Devices[0].Permissions != "mrw" {
			t.Fatalf("allocated %+v", cr.Devices)
		}
	}

	// The kubelet wipes its directory when it starts: the plugin must register again.
	if err := os.Remove(filepath.Join(dir, req.Endpoint)); err != nil {
		t.Fatal(err)
	}
	if again := k.waitRegistered(t); again.ResourceName != req.ResourceName {
		t.Fatalf("registered again as %+v", again)
	}

	offered.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, req.Endpoint)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a device no longer offered still has its plugin socket")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
