package netplumb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
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
//
// It runs in the node agent, which serves every VM of the node, and parses what a guest sends:
// a panic while handling a packet is recovered and logged, the packet dropped, and serving goes
// on, so no guest can stop the process or another VM's server.
type DHCPServer struct {
	conn net.PacketConn
	cfg  DHCPConfig
	log  logr.Logger
	done chan struct{}
	once sync.Once
	err  error
	// closed is set by Close before the socket goes, so the serving loop knows its read
	// failure is the end and not an accident.
	closed atomic.Bool
	// panics counts the packets whose handling panicked, for tests and logs.
	panics atomic.Int64
	// handlePacket is DHCPConfig.handlePacket; tests swap in one that panics.
	handlePacket func(*DHCPConfig, []byte) ([]byte, dhcpv4.MessageType, error)
}

// maxDHCPPacket is the largest request read. A DHCP message over Ethernet is at most 1500 bytes
// less its headers; the rest of a bigger datagram is dropped by the read.
const maxDHCPPacket = 4096

// StartDHCP starts a DHCP server on cfg.Interface inside the network namespace at nsPath.
// Its socket is bound to that link, so it serves nothing else; it runs until Close.
func StartDHCP(ctx context.Context, nsPath string, cfg DHCPConfig) (*DHCPServer, error) {
	if cfg.Interface == "" || !cfg.ServerIP.Is4() || !cfg.ClientIP.Addr().Is4() || len(cfg.ClientMAC) != 6 {
		return nil, fmt.Errorf("dhcp: interface, IPv4 server and client addresses and a client MAC are required")
	}
	// The socket is made inside the namespace and stays there; serving needs no pinned thread.
	var conn net.PacketConn
	err := Do(nsPath, func() error {
		c, err := server4.NewIPv4UDPConn(cfg.Interface, &net.UDPAddr{Port: dhcpv4.ServerPort})
		if err != nil {
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dhcp on %s: %w", cfg.Interface, err)
	}
	s := newDHCPServer(logr.FromContextOrDiscard(ctx).WithValues("dhcp", cfg.Interface), cfg, conn)
	go s.run()
	s.log.V(1).Info("dhcp serving", "client", cfg.ClientMAC.String(), "ip", cfg.ClientIP)
	return s, nil
}

func newDHCPServer(log logr.Logger, cfg DHCPConfig, conn net.PacketConn) *DHCPServer {
	return &DHCPServer{
		conn:         conn,
		cfg:          cfg,
		log:          log,
		done:         make(chan struct{}),
		handlePacket: (*DHCPConfig).handlePacket,
	}
}

// Close stops the server and waits for it to end; the error is why it had stopped early.
func (s *DHCPServer) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		_ = s.conn.Close()
	})
	<-s.done
	return s.err
}

// run serves until the socket is closed. The library's server4.Server.Serve is not used: it
// parses every packet in its serving goroutine and handles each in a goroutine of its own,
// neither with a recover, so a packet that makes the parser panic would end the node agent.
// Here one goroutine reads and handles each packet in turn (a guest has one client to serve),
// recovering any panic; should the loop itself panic, it is logged and the loop started again.
func (s *DHCPServer) run() {
	defer close(s.done)
	for {
		panicked, err := s.serveRecovered()
		if !panicked {
			if err != nil && !s.closed.Load() && !errors.Is(err, net.ErrClosed) {
				s.err = err
				s.log.Error(err, "dhcp server stopped")
			}
			return
		}
		if s.closed.Load() {
			return
		}
		time.Sleep(100 * time.Millisecond) // no busy loop should the panic come back at once
	}
}

func (s *DHCPServer) serveRecovered() (panicked bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			s.panics.Add(1)
			s.log.Error(fmt.Errorf("panic: %v", p), "dhcp serving loop recovered; serving on", "stack", string(debug.Stack()))
		}
	}()
	return false, s.serve()
}

func (s *DHCPServer) serve() error {
	buf := make([]byte, maxDHCPPacket)
	for {
		n, peer, err := s.conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		s.serveOne(peer, buf[:n])
	}
}

// serveOne answers one packet, recovering a panic in its handling: the packet is dropped, the
// panic logged with the VM's identity (the logger's values), and serving goes on.
func (s *DHCPServer) serveOne(peer net.Addr, pkt []byte) {
	defer func() {
		if p := recover(); p != nil {
			s.panics.Add(1)
			s.log.Error(fmt.Errorf("panic: %v", p), "dhcp packet dropped: handling it panicked",
				"from", peer.String(), "length", len(pkt), "stack", string(debug.Stack()))
		}
	}()
	out, typ, err := s.handlePacket(&s.cfg, pkt)
	if err != nil {
		s.log.V(2).Info("dhcp packet ignored", "from", peer.String(), "reason", err.Error())
		return
	}
	if out == nil {
		return
	}
	to, ok := peer.(*net.UDPAddr)
	if !ok {
		return
	}
	// A client without an address yet is answered by broadcast, and so is every NAK
	// (RFC 2131 4.1, 4.3.2).
	if to.IP == nil || to.IP.IsUnspecified() || typ == dhcpv4.MessageTypeNak {
		to = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	}
	if _, err := s.conn.WriteTo(out, to); err != nil {
		s.log.Error(err, "dhcp reply", "to", to.String())
		return
	}
	s.log.V(1).Info("dhcp reply", "type", typ.String(), "to", to.String())
}

// errNotForUs is a well-formed request this server does not answer.
var errNotForUs = errors.New("not a request for this server")

// handlePacket is the answer, encoded, to the raw request pkt, with its message type; no answer
// and an error saying why when pkt is malformed or not for this server. It has no recover of its
// own (the fuzz target calls it directly, so a panic fails it); the server wraps it in one.
func (c *DHCPConfig) handlePacket(pkt []byte) ([]byte, dhcpv4.MessageType, error) {
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		return nil, dhcpv4.MessageTypeNone, err
	}
	resp := c.reply(req)
	if resp == nil {
		return nil, dhcpv4.MessageTypeNone, fmt.Errorf("%w: %s from %s", errNotForUs, req.MessageType(), req.ClientHWAddr)
	}
	return resp.ToBytes(), resp.MessageType(), nil
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
	var dns []net.IP
	for _, a := range c.DNS {
		if a.Is4() || a.Is4In6() {
			dns = append(dns, a.Unmap().AsSlice())
		}
	}
	if len(dns) > 0 {
		m = append(m, dhcpv4.WithDNS(dns...))
	}
	if c.DomainName != "" && validDomainName(c.DomainName) {
		m = append(m, dhcpv4.WithGeneric(dhcpv4.OptionDomainName, []byte(c.DomainName)))
	}
	if search := encodeDomainSearch(c.SearchDomains); len(search) > 0 {
		m = append(m, dhcpv4.WithGeneric(dhcpv4.OptionDNSDomainSearchList, search))
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
