package podnet

import (
	"fmt"
	"net/netip"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// masqueradeAddrs are the masquerade binding's gateway (the bridge's address, with the subnet's
// length) and the guest's address for the pod network's vmNetworkCIDR: the first and second
// host addresses of the subnet, as in KubeVirt. An empty CIDR leaves netplumb's default,
// 10.0.2.0/24.
func masqueradeAddrs(cidr string) (gateway netip.Prefix, guest netip.Addr, err error) {
	if cidr == "" {
		return netip.Prefix{}, netip.Addr{}, nil
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("vmNetworkCIDR %q is not an IPv4 CIDR", cidr)
	}
	// The network and broadcast addresses, the gateway and the guest: four at least.
	if p.Bits() > 30 {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("vmNetworkCIDR %q has no room for a gateway and a guest: a /30 or larger is needed", cidr)
	}
	p = p.Masked()
	gw := p.Addr().Next()
	return netip.PrefixFrom(gw, p.Bits()), gw.Next(), nil
}

// podNetworkOf is the pod network an interface is attached to, nil if none.
func podNetworkOf(vmi *v1.VirtualMachineInstance, iface v1.Interface) *v1.PodNetwork {
	for _, n := range vmi.Spec.Networks {
		if n.Name == iface.Name && n.Pod != nil {
			return n.Pod
		}
	}
	return nil
}
