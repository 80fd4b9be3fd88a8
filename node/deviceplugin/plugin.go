// Package deviceplugin offers host devices (/dev/kvm, /dev/net/tun, /dev/vhost-net,
// /dev/vhost-vsock) to pods through the kubelet's device-plugin API, as KubeVirt's virt-handler
// does: each device is a resource devices.kubevirt.io/<name> with many interchangeable units, so
// the scheduler places a VM only where its devices exist and the kubelet hands them to the
// launcher's container without a privileged pod or a hostPath of /dev.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ResourcePrefix is KubeVirt's namespace of device resources.
const ResourcePrefix = "devices.kubevirt.io/"

// Defaults of Options.
const (
	// DefaultCount is how many units of each device a node offers (KubeVirt's --max-devices):
	// the devices can be shared, so the number only bounds VMs per node.
	DefaultCount = 1000
	// DefaultPermissions are the cgroup device permissions granted with each unit.
	DefaultPermissions = "mrw"
	// DefaultHostRoot is where the host's filesystem is seen from the node agent's container
	// (host PID namespace): a device that appears after the container started shows up there.
	DefaultHostRoot = "/proc/1/root"
	// DefaultPoll is how often a plugin checks its device and its socket.
	DefaultPoll = 2 * time.Second
)

// Device is one host device, offered as ResourcePrefix+Name.
type Device struct {
	Name string // kvm
	Path string // /dev/kvm, on the host and in the container
}

// ResourceName is the extended resource pods request.
func (d Device) ResourceName() string { return ResourcePrefix + d.Name }

// Options are shared by every plugin of a node.
type Options struct {
	// Dir is the kubelet's device-plugin directory, holding kubelet.sock.
	Dir         string
	Count       int
	Permissions string
	// HostRoot prefixes a device's path when checking that it exists ("" or "/": as seen).
	HostRoot string
	Poll     time.Duration
	Log      logr.Logger
}

func (o Options) withDefaults() Options {
	if o.Dir == "" {
		o.Dir = pluginapi.DevicePluginPath
	}
	if o.Count <= 0 {
		o.Count = DefaultCount
	}
	if o.Permissions == "" {
		o.Permissions = DefaultPermissions
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	return o
}

// plugin serves one device to the kubelet.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	dev Device
	o   Options
	log logr.Logger

	mu      sync.Mutex
	healthy bool
	changed chan struct{} // closed and replaced whenever healthy changes
}

func newPlugin(dev Device, o Options) *plugin {
	return &plugin{dev: dev, o: o, log: o.Log.WithValues("resource", dev.ResourceName()), changed: make(chan struct{})}
}

// socketName is KubeVirt's name of a plugin's socket in the kubelet's directory.
func (p *plugin) socketName() string { return "kubevirt-" + p.dev.Name + ".sock" }

func (p *plugin) socketPath() string { return filepath.Join(p.o.Dir, p.socketName()) }

// run serves and registers the plugin until ctx ends, starting over whenever the kubelet
// restarts (it wipes its directory, and with it the plugin's socket, at start).
func (p *plugin) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := p.serve(ctx); err != nil {
			p.log.Error(err, "device plugin stopped; starting over")
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.o.Poll):
		}
	}
}

// serve returns when ctx ends (nil) or the socket is gone.
func (p *plugin) serve(ctx context.Context) error {
	path := p.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Stop()
		_ = os.Remove(path)
	}()
	p.checkHealth()
	if err := p.register(ctx); err != nil {
		return fmt.Errorf("registering with the kubelet: %w", err)
	}
	p.log.Info("device plugin registered", "device", p.dev.Path, "healthy", p.isHealthy())
	tick := time.NewTicker(p.o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return fmt.Errorf("serving: %w", err)
		case <-tick.C:
			if _, err := os.Stat(path); err != nil {
				p.log.Info("device plugin socket removed (the kubelet restarted); registering again")
				return nil
			}
			p.checkHealth()
		}
	}
}

func (p *plugin) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.o.Dir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.socketName(),
		ResourceName: p.dev.ResourceName(),
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

// checkHealth looks for the device on the host; the kubelet offers no units of a missing one.
func (p *plugin) checkHealth() {
	_, err := os.Stat(filepath.Join(p.o.HostRoot, p.dev.Path))
	healthy := err == nil
	p.mu.Lock()
	defer p.mu.Unlock()
	if healthy == p.healthy {
		return
	}
	p.healthy = healthy
	close(p.changed)
	p.changed = make(chan struct{})
	if healthy {
		p.log.Info("device present", "device", p.dev.Path)
	} else {
		p.log.Info("device not present: the node offers none", "device", p.dev.Path)
	}
}

func (p *plugin) isHealthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthy
}

// devices lists every unit with the device's health, and the channel closed at the next change.
func (p *plugin) devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	health := pluginapi.Unhealthy
	if p.healthy {
		health = pluginapi.Healthy
	}
	out := make([]*pluginapi.Device, p.o.Count)
	for i := range out {
		out[i] = &pluginapi.Device{ID: p.dev.Name + strconv.Itoa(i), Health: health}
	}
	return out, p.changed
}

// GetDevicePluginOptions: no pre-start call, no preferred allocation.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the units now and again whenever the device comes or goes.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devs, changed := p.devices()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// Allocate gives each container the device node; every unit is the same device.
func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Devices: []*pluginapi.DeviceSpec{{ContainerPath: p.dev.Path, HostPath: p.dev.Path, Permissions: p.o.Permissions}},
		})
	}
	return resp, nil
}

// PreStartContainer is not asked for (GetDevicePluginOptions).
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
