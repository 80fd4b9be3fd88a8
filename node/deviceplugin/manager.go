package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Permanent are the devices every node offers, as KubeVirt's: the hypervisor, the tap device and
// vhost-net. A node without one offers zero units of it.
var Permanent = []Device{
	{Name: "kvm", Path: "/dev/kvm"},
	{Name: "tun", Path: "/dev/net/tun"},
	{Name: "vhost-net", Path: "/dev/vhost-net"},
}

// VhostVsock is offered while the VSOCK feature gate is on.
var VhostVsock = Device{Name: "vhost-vsock", Path: "/dev/vhost-vsock"}

// Manager runs one plugin per device of a set that may change (a feature gate turned on or off).
type Manager struct {
	o Options
	// Devices is asked at every poll which devices to offer.
	Devices func() []Device
}

// NewManager offers devices() with options o.
func NewManager(o Options, devices func() []Device) *Manager {
	return &Manager{o: o.withDefaults(), Devices: devices}
}

// Start runs the plugins until ctx ends (a controller-runtime Runnable).
func (m *Manager) Start(ctx context.Context) error {
	m.o.HostRoot = usableHostRoot(m.o.HostRoot, m.o.Log)
	running := map[Device]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, stop := range running {
			stop()
		}
		wg.Wait()
	}()
	tick := time.NewTicker(m.o.Poll)
	defer tick.Stop()
	for {
		want := map[Device]bool{}
		for _, d := range m.Devices() {
			want[d] = true
		}
		for d, stop := range running {
			if !want[d] {
				m.o.Log.Info("no longer offering device", "resource", d.ResourceName())
				stop()
				delete(running, d)
			}
		}
		for d := range want {
			if _, ok := running[d]; ok {
				continue
			}
			pctx, stop := context.WithCancel(ctx)
			running[d] = stop
			p := newPlugin(d, m.o)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.run(pctx)
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// NeedLeaderElection is false: every node agent offers its own node's devices.
func (m *Manager) NeedLeaderElection() bool { return false }

// usableHostRoot is root when the host's /dev can be read through it. Where the host's init
// cannot be looked into (/proc/1/root refused), the container's own /dev is used: a privileged
// container has the host's devices as they were when it started.
func usableHostRoot(root string, log logr.Logger) string {
	if root == "" || root == "/" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(root, "dev")); err != nil {
		log.Info("the host's filesystem cannot be read here; looking for devices in this container's /dev", "hostRoot", root, "reason", err.Error())
		return ""
	}
	return root
}
