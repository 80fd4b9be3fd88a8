package netplumb

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

var (
	guestMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x0a, 0x0b, 0x0c}
	otherMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x0d, 0x0e, 0x0f}
)

func testDHCPConfig() DHCPConfig {
	return DHCPConfig{
		Interface: "srv0",
		ServerIP:  netip.MustParseAddr("10.0.2.1"),
		ClientMAC: guestMAC,
		ClientIP:  netip.MustParsePrefix("10.0.2.2/24"),
		Gateway:   netip.MustParseAddr("10.0.2.1"),
		MTU:       1450,
		DHCPOptions: DHCPOptions{
			DNS:           []netip.Addr{netip.MustParseAddr("10.96.0.10")},
			SearchDomains: []string{"default.svc.cluster.local", "cluster.local"},
			Hostname:      "vm1",
		},
	}
}

func request(t *testing.T, typ dhcpv4.MessageType, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDHCPReplies(t *testing.T) {
	cfg := testDHCPConfig()
	offer := cfg.reply(request(t, dhcpv4.MessageTypeDiscover, guestMAC))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("discover: %v", offer)
	}
	if !offer.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) || !offer.ServerIdentifier().Equal(net.ParseIP("10.0.2.1")) ||
		offer.SubnetMask().String() != "ffffff00" || len(offer.Router()) != 1 || !offer.Router()[0].Equal(net.ParseIP("10.0.2.1")) ||
		len(offer.DNS()) != 1 || offer.HostName() != "vm1" || offer.DomainSearch() == nil ||
		offer.IPAddressLeaseTime(0) != time.Duration(1<<32-1)*time.Second {
		t.Fatalf("offer:\n%s", offer.Summary())
	}
	if mtu := offer.Options.Get(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != 1450 {
		t.Fatalf("MTU option %v", mtu)
	}
	if offer.Options.Has(dhcpv4.OptionClasslessStaticRoute) {
		t.Fatal("classless routes sent without any routes")
	}

	if r := cfg.reply(request(t, dhcpv4.MessageTypeDiscover, otherMAC)); r != nil {
		t.Fatalf("answered another MAC: %s", r.Summary())
	}
	ack := cfg.reply(request(t, dhcpv4.MessageTypeRequest, guestMAC,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.2"))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.1")))))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) {
		t.Fatalf("request: %v", ack)
	}
	nak := cfg.reply(request(t, dhcpv4.MessageTypeRequest, guestMAC,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.9")))))
	if nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("request for another address: %v", nak)
	}
	if r := cfg.reply(request(t, dhcpv4.MessageTypeRequest, guestMAC,
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.7"))))); r != nil {
		t.Fatalf("answered a request for another server: %s", r.Summary())
	}
	if r := cfg.reply(request(t, dhcpv4.MessageTypeRelease, guestMAC)); r != nil {
		t.Fatalf("answered a release: %s", r.Summary())
	}

	// With routes, option 121 carries them and the default route, which a client taking 121
	// would otherwise lose (RFC 3442).
	cfg.Routes = []Route{{Dst: netip.MustParsePrefix("169.254.1.1/32")}}
	offer = cfg.reply(request(t, dhcpv4.MessageTypeDiscover, guestMAC))
	routes := offer.ClasslessStaticRoute()
	if len(routes) != 2 || routes[0].String() != "route to 169.254.1.1/32 via 0.0.0.0" || routes[1].String() != "route to 0.0.0.0/0 via 10.0.2.1" {
		t.Fatalf("classless routes %v", routes)
	}
}

// TestDHCPLeaseOverVeth runs the server in one namespace and the library's client in another,
// across a veth: the client gets its lease, and a client with another MAC gets nothing.
func TestDHCPLeaseOverVeth(t *testing.T) {
	srvNS, guestNS := newNetNS(t, "dhcpsrv"), newNetNS(t, "dhcpguest")
	g, err := netns.GetFromPath(guestNS)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	withNL(t, srvNS, func(h *netlink.Handle) error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "srv0"
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerHardwareAddr: guestMAC, PeerNamespace: netlink.NsFd(g)}); err != nil {
			return err
		}
		l, err := h.LinkByName("srv0")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.0.2.1/24")
		if err := h.AddrAdd(l, addr); err != nil {
			return err
		}
		return h.LinkSetUp(l)
	})
	withNL(t, guestNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		return h.LinkSetUp(l)
	})

	srv, err := StartDHCP(context.Background(), srvNS, testDHCPConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	lease := func(opts ...nclient4.ClientOpt) (*nclient4.Lease, error) {
		var c *nclient4.Client
		if err := Do(guestNS, func() error {
			var err error
			c, err = nclient4.New("eth0", opts...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return c.Request(ctx)
	}
	l, err := lease(nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(5))
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if !l.ACK.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) || l.ACK.Router()[0].String() != "10.0.2.1" || l.ACK.HostName() != "vm1" {
		t.Fatalf("ack:\n%s", l.ACK.Summary())
	}

	if l, err := lease(nclient4.WithHWAddr(otherMAC), nclient4.WithTimeout(300*time.Millisecond), nclient4.WithRetry(1)); err == nil {
		t.Fatalf("a client with another MAC got a lease:\n%s", l.ACK.Summary())
	}

	if err := srv.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// A closed server can be replaced by a new one on the same link.
	srv2, err := StartDHCP(context.Background(), srvNS, testDHCPConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv2.Close(); err != nil {
		t.Fatal(err)
	}
}
