package netplumb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MasqueradeConfig is KubeVirt's `masquerade: {}` binding: the guest sits on a private subnet
// behind a bridge and reaches the network as the pod's IP; traffic for the pod's IP is
// forwarded to it.
type MasqueradeConfig struct {
	// PodInterface defaults to eth0.
	PodInterface string
	// Bridge defaults to k6t-<PodInterface>.
	Bridge string
	// Tap defaults to tap0.
	Tap      string
	TapOwner *Owner
	// MAC is the guest's MAC; by default a random one, kept across runs.
	MAC net.HardwareAddr
	// Gateway is the bridge's address and the guest's router (default 10.0.2.1/24).
	Gateway netip.Prefix
	// GuestIP defaults to the address after Gateway's (10.0.2.2).
	GuestIP netip.Addr
	// Ports forwarded from the pod's IP to the guest; none forwards everything.
	Ports []Port
	DHCP  DHCPOptions
}

func (c *MasqueradeConfig) defaults() {
	c.PodInterface = defaultString(c.PodInterface, "eth0")
	c.Bridge = defaultString(c.Bridge, "k6t-"+c.PodInterface)
	c.Tap = defaultString(c.Tap, "tap0")
	if !c.Gateway.IsValid() {
		c.Gateway = netip.MustParsePrefix("10.0.2.1/24")
	}
	if !c.GuestIP.IsValid() {
		c.GuestIP = c.Gateway.Addr().Next()
	}
}

// MasqueradeBinding wires one VM with the masquerade binding in the pod namespace at a path.
type MasqueradeBinding struct {
	nsPath string
	cfg    MasqueradeConfig

	mu    sync.Mutex
	dhcp  dhcpSlot
	steps []masqStep
}

type masqStep struct {
	name string
	run  func(*masqRun) error
}

type masqRun struct {
	b   *MasqueradeBinding
	c   *nsConn
	r   *Reverter
	log logr.Logger
	rec *record
	br  *netlink.Bridge
	res *Result
}

var _ Binding = (*MasqueradeBinding)(nil)

// NewMasqueradeBinding returns the binding for the namespace at nsPath.
func NewMasqueradeBinding(nsPath string, cfg MasqueradeConfig) *MasqueradeBinding {
	cfg.defaults()
	b := &MasqueradeBinding{nsPath: nsPath, cfg: cfg}
	b.steps = []masqStep{
		{"discover", (*masqRun).discover},
		{"bridge", (*masqRun).bridge},
		{"gateway address", (*masqRun).gatewayAddress},
		{"tap", (*masqRun).tap},
		{"forwarding", (*masqRun).forwarding},
		{"nat", (*masqRun).nat},
		{"dhcp", (*masqRun).startDHCP},
	}
	return b
}

func (b *MasqueradeBinding) tableName() string { return "qvirt-" + b.cfg.Bridge }

// Setup wires the binding, or confirms it is wired, and serves DHCP to the guest. On failure
// it undoes what it did.
func (b *MasqueradeBinding) Setup(ctx context.Context) (res *Result, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.cfg.Gateway.Addr().Is4() || !b.cfg.Gateway.Contains(b.cfg.GuestIP) || b.cfg.GuestIP == b.cfg.Gateway.Addr() {
		return nil, fmt.Errorf("masquerade binding: guest %s must be another IPv4 address of %s", b.cfg.GuestIP, b.cfg.Gateway)
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("netns", b.nsPath, "binding", kindMasquerade)
	c, err := openNS(b.nsPath)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := NewReverter(log)
	defer r.Finish(&err)
	run := &masqRun{b: b, c: c, r: r, log: log}
	for _, s := range b.steps {
		log.V(1).Info("step", "name", s.name)
		if err := s.run(run); err != nil {
			return nil, fmt.Errorf("masquerade binding in %s: %s: %w", b.nsPath, s.name, err)
		}
	}
	return run.res, nil
}

func (s *masqRun) discover() error {
	cfg := &s.b.cfg
	pod, err := s.c.mustLink(cfg.PodInterface)
	if err != nil {
		return err
	}
	addrs, err := s.c.addrs(pod)
	if err != nil {
		return err
	}
	var podIP netip.Prefix
	for _, a := range addrs {
		if a.Scope == unix.RT_SCOPE_UNIVERSE {
			podIP = prefixFromIPNet(a.IPNet)
			break
		}
	}
	if !podIP.IsValid() {
		return fmt.Errorf("%w: %s", ErrNoAddress, cfg.PodInterface)
	}
	if s.rec, err = readRecord(s.c, cfg.Bridge, kindMasquerade); err != nil {
		return err
	}
	if s.rec == nil {
		s.rec = &record{kind: kindMasquerade, guestMAC: cfg.MAC}
		if s.rec.guestMAC == nil {
			s.rec.guestMAC = randomMAC()
		}
		if s.rec.forward, err = s.c.readSysctl(ipForward); err != nil {
			return err
		}
	}
	s.res = &Result{
		PodInterface: cfg.PodInterface,
		Bridge:       cfg.Bridge,
		Tap:          cfg.Tap,
		MAC:          s.rec.guestMAC,
		PodIP:        podIP,
		GuestIP:      netip.PrefixFrom(cfg.GuestIP, cfg.Gateway.Bits()),
		Gateway:      cfg.Gateway.Addr(),
		MTU:          pod.Attrs().MTU,
	}
	return nil
}

func (s *masqRun) bridge() error {
	alias, err := s.rec.encode()
	if err != nil {
		return err
	}
	if s.br, err = s.c.ensureBridge(s.r, s.b.cfg.Bridge, s.res.MTU, randomMAC(), alias); err != nil {
		return err
	}
	return s.c.setUp(s.r, s.br)
}

func (s *masqRun) gatewayAddress() error {
	addr := &netlink.Addr{IPNet: ipNet(s.b.cfg.Gateway)}
	added, err := s.c.ensureAddr(s.br, addr)
	if err != nil {
		return err
	}
	if added {
		s.r.Add("gateway address", func() error { return s.c.nl.AddrDel(s.br, addr) })
	}
	return nil
}

func (s *masqRun) tap() error {
	if _, err := s.c.ensureTap(s.r, TapConfig{Name: s.b.cfg.Tap, MTU: s.res.MTU, Owner: s.b.cfg.TapOwner}, false); err != nil {
		return err
	}
	tap, err := s.c.mustLink(s.b.cfg.Tap)
	if err != nil {
		return err
	}
	return s.c.setMaster(s.r, tap, s.br)
}

// forwarding turns on IPv4 forwarding in the pod's namespace only: the guest's traffic is
// routed between the bridge and the pod interface.
func (s *masqRun) forwarding() error {
	cur, err := s.c.readSysctl(ipForward)
	if err != nil || cur == "1" {
		return err
	}
	if err := s.c.writeSysctl(ipForward, "1"); err != nil {
		return err
	}
	s.r.Add("forwarding", func() error { return s.c.writeSysctl(ipForward, cur) })
	return nil
}

func (s *masqRun) nat() error {
	conn, err := s.c.nft()
	if err != nil {
		return err
	}
	rules := natRules{
		table:    s.b.tableName(),
		podIface: s.b.cfg.PodInterface,
		podIP:    s.res.PodIP.Addr(),
		guestIP:  s.b.cfg.GuestIP,
		ports:    s.b.cfg.Ports,
	}
	existed, err := tableExists(conn, rules.table)
	if err != nil {
		return err
	}
	if err := rules.apply(conn); err != nil {
		return err
	}
	if !existed {
		s.r.Add("nat", func() error { return deleteTable(conn, rules.table) })
	}
	return nil
}

func (s *masqRun) startDHCP() error {
	return s.b.dhcp.start(s.log, s.c.path, DHCPConfig{
		Interface:   s.b.cfg.Bridge,
		ServerIP:    s.b.cfg.Gateway.Addr(),
		ClientMAC:   s.res.MAC,
		ClientIP:    s.res.GuestIP,
		Gateway:     s.res.Gateway,
		MTU:         s.res.MTU,
		DHCPOptions: s.b.cfg.DHCP,
	}, s.r)
}

// Close stops the DHCP server and leaves the wiring in place.
func (b *MasqueradeBinding) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dhcp.stop()
}

// Teardown stops the DHCP server, removes the NAT table, puts ip_forward back as it was, and
// deletes the tap and the bridge. It goes on past failures and returns them all.
func (b *MasqueradeBinding) Teardown(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := []error{b.dhcp.stop()}
	c, err := openNS(b.nsPath)
	if errors.Is(err, os.ErrNotExist) {
		// The pod and its namespace are gone, and everything in it with them.
		return errors.Join(errs...)
	}
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer c.Close()
	rec, err := readRecord(c, b.cfg.Bridge, kindMasquerade)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	conn, err := c.nft()
	if err == nil {
		err = deleteTable(conn, b.tableName())
	}
	errs = append(errs, err)
	if rec != nil && rec.forward != "" && rec.forward != "1" {
		errs = append(errs, c.writeSysctl(ipForward, rec.forward))
	}
	errs = append(errs, c.delLink(b.cfg.Tap), c.delLink(b.cfg.Bridge))
	return errors.Join(errs...)
}
