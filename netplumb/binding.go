package netplumb

import (
	"context"
	"crypto/rand"
	"net"
	"net/netip"
)

// Binding wires one VM interface into a pod's network namespace. Setup is idempotent and
// leaves nothing behind when it fails; Teardown removes what Setup made; Close stops the DHCP
// server and leaves the wiring (for an agent that stops while the VM runs on).
type Binding interface {
	Setup(ctx context.Context) (*Result, error)
	Teardown(ctx context.Context) error
	Close() error
}

// Route is an IPv4 route the guest gets.
type Route struct {
	// Dst is 0.0.0.0/0 for the default route.
	Dst netip.Prefix
	// Gateway is the next hop; the zero Addr means the destination is on the link.
	Gateway netip.Addr
}

// Result is what a binding set up: the MAC to give QEMU's NIC, the tap to open, and the
// addressing to report in the VM's status.
type Result struct {
	PodInterface string
	Bridge       string
	Tap          string
	// MAC is the guest NIC's MAC address.
	MAC net.HardwareAddr
	// PodIP is the address the network sees for the VM: the pod's IP.
	PodIP netip.Prefix
	// GuestIP is what the guest is offered by DHCP: the pod's IP with the bridge binding,
	// the private address behind the NAT with masquerade.
	GuestIP netip.Prefix
	// Gateway is the guest's default gateway; the zero Addr when it has none.
	Gateway netip.Addr
	// Routes are the guest's routes besides the one of its own subnet.
	Routes []Route
	MTU    int
}

// DHCPOptions are what the guest's DHCP offer carries besides its addressing.
type DHCPOptions struct {
	// DNS are the resolvers (option 6); only IPv4 ones can be sent.
	DNS []netip.Addr
	// DomainName is option 15, the guest's domain.
	DomainName string
	// SearchDomains are option 119, encoded without compression; invalid names and those past
	// the option's 255 bytes are left out.
	SearchDomains []string
	Hostname      string
}

// Protocol is a transport protocol of a forwarded port.
type Protocol string

const (
	TCP Protocol = "TCP"
	UDP Protocol = "UDP"
)

// Port is a port forwarded from the pod's IP to the guest.
type Port struct {
	Protocol Protocol
	Port     uint16
}

// randomMAC returns a random locally administered unicast MAC address.
func randomMAC() net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	_, _ = rand.Read(m)
	m[0] = m[0]&^1 | 2
	return m
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// addrFromIP converts a 4- or 16-byte IPv4 address.
func addrFromIP(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func prefixFromIPNet(n *net.IPNet) netip.Prefix {
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addrFromIP(n.IP), ones)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
