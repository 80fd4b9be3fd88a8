// Package podnet wires a VMI's pod-network interface with netplumb: KubeVirt's bridge and
// masquerade bindings inside the launcher pod's network namespace.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/netplumb"
	"github.com/qvirt/qvirt/node/handler"
)

// Plumber implements handler.Network. It keeps each VM's binding (and so its DHCP server)
// for as long as the VM runs on this node.
type Plumber struct {
	Log logr.Logger

	mu       sync.Mutex
	bindings map[types.UID]netplumb.Binding
}

var _ handler.Network = (*Plumber)(nil)

// Setup wires iface in the namespace at nsPath. A tap already held by QEMU (after a node agent
// restart) yields no new descriptor: the running VM keeps the one it has.
func (p *Plumber) Setup(ctx context.Context, pod handler.PodNet, vmi *v1.VirtualMachineInstance, iface v1.Interface) (*handler.PlumbedNIC, error) {
	nsPath := pod.NetnsPath
	var mac net.HardwareAddr
	if iface.MacAddress != "" {
		var err error
		if mac, err = net.ParseMAC(iface.MacAddress); err != nil {
			return nil, fmt.Errorf("macAddress: %w", err)
		}
	}
	// The binding's DHCP server logs with the VM's identity (the context's logger has its name).
	ctx = logr.NewContext(ctx, logr.FromContextOrDiscard(ctx).WithValues("vmiUID", string(vmi.UID), "interface", iface.Name))
	dhcp := dhcpOptions(vmi, pod.DNS)
	var b netplumb.Binding
	masq := iface.Masquerade != nil
	switch {
	case iface.Bridge != nil:
		b = netplumb.NewBridgeBinding(nsPath, netplumb.BridgeConfig{MAC: mac, DHCP: dhcp})
	case masq:
		var ports []netplumb.Port
		for _, pt := range iface.Ports {
			proto := netplumb.TCP
			if strings.EqualFold(pt.Protocol, "UDP") {
				proto = netplumb.UDP
			}
			ports = append(ports, netplumb.Port{Protocol: proto, Port: uint16(pt.Port)})
		}
		cfg := netplumb.MasqueradeConfig{MAC: mac, Ports: ports, DHCP: dhcp}
		if pn := podNetworkOf(vmi, iface); pn != nil {
			var err error
			if cfg.Gateway, cfg.GuestIP, err = masqueradeAddrs(pn.VMNetworkCIDR); err != nil {
				return nil, fmt.Errorf("interface %s: %w", iface.Name, err)
			}
		}
		b = netplumb.NewMasqueradeBinding(nsPath, cfg)
	default:
		return nil, fmt.Errorf("interface %s: only the bridge and masquerade bindings are supported", iface.Name)
	}
	res, err := b.Setup(ctx)
	if err != nil {
		return nil, err
	}
	p.keep(vmi.UID, b)
	tap, err := netplumb.OpenTap(ctx, nsPath, netplumb.TapConfig{Name: res.Tap, MTU: res.MTU})
	if err != nil && !errors.Is(err, netplumb.ErrTapBusy) {
		return nil, err
	}
	nic := &handler.PlumbedNIC{Tap: tap, TapName: res.Tap, MAC: res.MAC.String(), PodInterfaceName: res.PodInterface,
		IPs: []string{res.PodIP.Addr().String()}}
	if masq {
		// Behind NAT the guest is reached at its private address from inside the pod.
		nic.GuestAddr, nic.GuestAddrInPod = res.GuestIP.Addr().String(), true
	} else {
		// With the bridge binding the guest holds the pod IP, which the node reaches like any
		// pod's (the pod's own namespace has no route to it any more).
		nic.GuestAddr = res.PodIP.Addr().String()
	}
	return nic, nil
}

func (p *Plumber) keep(uid types.UID, b netplumb.Binding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bindings == nil {
		p.bindings = map[types.UID]netplumb.Binding{}
	}
	if old := p.bindings[uid]; old != nil && old != b {
		_ = old.Close()
	}
	p.bindings[uid] = b
}

// Teardown stops what the binding runs in this process (its DHCP server). The wiring itself
// lives in the pod's namespace and goes with it.
func (p *Plumber) Teardown(uid types.UID) {
	p.mu.Lock()
	b := p.bindings[uid]
	delete(p.bindings, uid)
	p.mu.Unlock()
	if b != nil {
		if err := b.Close(); err != nil {
			p.Log.Error(err, "stopping the DHCP server", "vmiUID", uid)
		}
	}
}

func hostname(vmi *v1.VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	return vmi.Name
}
