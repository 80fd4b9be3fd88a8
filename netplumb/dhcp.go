package netplumb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// DHCPConfig is the single lease a DHCP server hands out.
type DHCPConfig struct {
	// Interface is the link the server listens on (a binding's bridge).
	Interface string
	// ServerIP is the server identifier: an address of Interface.
	ServerIP netip.Addr
	// ClientMAC is the only client answered.
	ClientMAC net.HardwareAddr
	ClientIP  netip.Prefix
	// Gateway is the default router; the zero Addr gives none.
	Gateway netip.Addr
	// Routes are sent as classless static routes (RFC 3442) besides the default route.
	Routes []Route
	MTU    int
	// LeaseTime defaults to infinite: the address is the pod's for the pod's life.
	LeaseTime time.Duration
	DHCPOptions
}

// DHCPServer answers one guest's DHCP requests on one link of one namespace.
type DHCPServer struct {
	srv  *server4.Server
	cfg  DHCPConfig
	log  logr.Logger
	done chan struct{}
	once sync.Once
	err  error
}

// StartDHCP starts a DHCP server on cfg.Interface inside the network namespace at nsPath.
// Its socket is bound to that link, so it serves nothing else; it runs until Close.
func StartDHCP(ctx context.Context, nsPath string, cfg DHCPConfig) (*DHCPServer, error) {
	if cfg.Interface == "" || !cfg.ServerIP.Is4() || !cfg.ClientIP.Addr().Is4() || len(cfg.ClientMAC) != 6 {
		return nil, fmt.Errorf("dhcp: interface, IPv4 server and client addresses and a client MAC are required")
	}
	s := &DHCPServer{
		cfg:  cfg,
		log:  logr.FromContextOrDiscard(ctx).WithValues("dhcp", cfg.Interface),
		done: make(chan struct{}),
	}
	// The socket is made inside the namespace and stays there; serving needs no pinned thread.
	err := Do(nsPath, func() error {
		var err error
		s.srv, err = server4.NewServer(cfg.Interface, &net.UDPAddr{Port: dhcpv4.ServerPort}, s.handle,
			server4.WithLogger(dhcpLogger{s.log}))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dhcp on %s: %w", cfg.Interface, err)
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.err = err
			s.log.Error(err, "dhcp server stopped")
		}
	}()
	s.log.V(1).Info("dhcp serving", "client", cfg.ClientMAC.String(), "ip", cfg.ClientIP)
	return s, nil
}

// Close stops the server and waits for it to end; the error is why it had stopped early.
func (s *DHCPServer) Close() error {
	s.once.Do(func() { _ = s.srv.Close() })
	<-s.done
	return s.err
}

func (s *DHCPServer) handle(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
	resp := s.cfg.reply(req)
	if resp == nil {
		s.log.V(2).Info("ignored", "type", req.MessageType().String(), "mac", req.ClientHWAddr.String())
		return
	}
	if resp.MessageType() == dhcpv4.MessageTypeNak {
		// RFC 2131 4.3.2: a NAK is always broadcast.
		peer = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	}
	if _, err := conn.WriteTo(resp.ToBytes(), peer); err != nil {
		s.log.Error(err, "dhcp reply", "to", peer.String())
		return
	}
	s.log.V(1).Info("dhcp reply", "type", resp.MessageType().String(), "to", peer.String(), "ip", resp.YourIPAddr.String())
}

// reply is the answer to req, or nil when req is not for this server.
func (c *DHCPConfig) reply(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	if req.OpCode != dhcpv4.OpcodeBootRequest || req.ClientHWAddr.String() != c.ClientMAC.String() {
		return nil
	}
	var typ dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(c.ServerIP.AsSlice()) {
			return nil // the client took another server's offer
		}
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr
		}
		typ = dhcpv4.MessageTypeAck
		if want != nil && !want.IsUnspecified() && !want.Equal(c.ClientIP.Addr().AsSlice()) {
			typ = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeInform:
		typ = dhcpv4.MessageTypeAck
	default:
		return nil
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithServerIP(c.ServerIP.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(c.ServerIP.AsSlice())),
	}
	if typ != dhcpv4.MessageTypeNak {
		mods = append(mods, c.leaseOptions(req.MessageType() != dhcpv4.MessageTypeInform)...)
	}
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil
	}
	return resp
}

func (c *DHCPConfig) leaseOptions(withAddress bool) []dhcpv4.Modifier {
	var m []dhcpv4.Modifier
	if withAddress {
		lease := c.LeaseTime
		if lease == 0 {
			lease = math.MaxUint32 * time.Second
		}
		m = append(m, dhcpv4.WithYourIP(c.ClientIP.Addr().AsSlice()),
			dhcpv4.WithLeaseTime(uint32(lease/time.Second)))
	}
	m = append(m, dhcpv4.WithNetmask(net.CIDRMask(c.ClientIP.Bits(), 32)))
	if c.Gateway.IsValid() {
		m = append(m, dhcpv4.WithRouter(c.Gateway.AsSlice()))
	}
	if len(c.Routes) > 0 {
		// RFC 3442: a client that takes option 121 ignores the router option, so the default
		// route goes in it too.
		var rs []*dhcpv4.Route
		for _, r := range c.Routes {
			rs = append(rs, dhcpRoute(r))
		}
		if c.Gateway.IsValid() {
			rs = append(rs, dhcpRoute(Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gateway: c.Gateway}))
		}
		m = append(m, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(rs...)))
	}
	if c.MTU > 0 {
		m = append(m, dhcpv4.WithGeneric(dhcpv4.OptionInterfaceMTU, []byte{byte(c.MTU >> 8), byte(c.MTU)}))
	}
	if len(c.DNS) > 0 {
		var ips []net.IP
		for _, a := range c.DNS {
			ips = append(ips, a.AsSlice())
		}
		m = append(m, dhcpv4.WithDNS(ips...))
	}
	if len(c.SearchDomains) > 0 {
		m = append(m, dhcpv4.WithOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: c.SearchDomains})))
	}
	if c.Hostname != "" {
		m = append(m, dhcpv4.WithOption(dhcpv4.OptHostName(c.Hostname)))
	}
	return m
}

func dhcpRoute(r Route) *dhcpv4.Route {
	gw := net.IPv4zero
	if r.Gateway.IsValid() {
		gw = r.Gateway.AsSlice()
	}
	return &dhcpv4.Route{Dest: ipNet(r.Dst), Router: gw}
}

// dhcpLogger sends the library's messages to logr at debug level.
type dhcpLogger struct{ log logr.Logger }

func (l dhcpLogger) Printf(format string, v ...any) { l.log.V(2).Info(fmt.Sprintf(format, v...)) }

func (l dhcpLogger) PrintMessage(prefix string, m *dhcpv4.DHCPv4) {
	l.log.V(2).Info(prefix, "message", m.Summary())
}
