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

// BridgeConfig is KubeVirt's `bridge: {}` binding: the guest takes over the pod interface's
// IP and MAC, and the pod interface becomes a port of a bridge that also holds the tap.
type BridgeConfig struct {
	// PodInterface defaults to eth0.
	PodInterface string
	// Bridge defaults to k6t-<PodInterface>.
	Bridge string
	// Tap defaults to tap0.
	Tap      string
	TapOwner *Owner
	// MAC is the guest's MAC; by default the pod interface's own, which it then gives up.
	MAC net.HardwareAddr
	// ServerIP is a link-local address on the bridge that the DHCP server sends from
	// (default 169.254.75.10/32); the bridge needs an address to send from.
	ServerIP netip.Prefix
	DHCP     DHCPOptions
}

func (c *BridgeConfig) defaults() {
	c.PodInterface = defaultString(c.PodInterface, "eth0")
	c.Bridge = defaultString(c.Bridge, "k6t-"+c.PodInterface)
	c.Tap = defaultString(c.Tap, "tap0")
	if !c.ServerIP.IsValid() {
		c.ServerIP = netip.MustParsePrefix("169.254.75.10/32")
	}
}

// BridgeBinding wires one VM with the bridge binding in the pod namespace at a path.
type BridgeBinding struct {
	nsPath string
	cfg    BridgeConfig

	mu   sync.Mutex
	dhcp dhcpSlot
	// steps are the named phases of Setup; tests insert failing ones.
	steps []bridgeStep
}

type bridgeStep struct {
	name string
	run  func(*bridgeRun) error
}

// bridgeRun is one Setup in progress.
type bridgeRun struct {
	b   *BridgeBinding
	c   *nsConn
	r   *Reverter
	log logr.Logger
	rec *record
	pod netlink.Link
	br  *netlink.Bridge
	res *Result
}

var _ Binding = (*BridgeBinding)(nil)

// NewBridgeBinding returns the binding for the namespace at nsPath (a path under
// /var/run/netns or /proc/PID/ns/net).
func NewBridgeBinding(nsPath string, cfg BridgeConfig) *BridgeBinding {
	cfg.defaults()
	b := &BridgeBinding{nsPath: nsPath, cfg: cfg}
	b.steps = []bridgeStep{
		{"discover", (*bridgeRun).discover},
		{"bridge", (*bridgeRun).bridge},
		{"server address", (*bridgeRun).serverAddress},
		{"tap", (*bridgeRun).tap},
		{"pod MAC", (*bridgeRun).podMAC},
		{"pod addresses", (*bridgeRun).podAddresses},
		{"attach pod interface", (*bridgeRun).attachPod},
		{"dhcp", (*bridgeRun).startDHCP},
	}
	return b
}

// Setup wires the binding, or confirms it is wired, and serves DHCP to the guest. On failure
// it undoes what it did.
func (b *BridgeBinding) Setup(ctx context.Context) (res *Result, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx).WithValues("netns", b.nsPath, "binding", kindBridge)
	c, err := openNS(b.nsPath)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := NewReverter(log)
	defer r.Finish(&err)
	run := &bridgeRun{b: b, c: c, r: r, log: log}
	for _, s := range b.steps {
		log.V(1).Info("step", "name", s.name)
		if err := s.run(run); err != nil {
			return nil, fmt.Errorf("bridge binding in %s: %s: %w", b.nsPath, s.name, err)
		}
	}
	return run.res, nil
}

// discover reads the pod's addressing: from the record on the bridge when an earlier run made
// one (the pod interface no longer has it), else from the pod interface.
func (s *bridgeRun) discover() error {
	cfg := &s.b.cfg
	var err error
	if s.pod, err = s.c.mustLink(cfg.PodInterface); err != nil {
		return err
	}
	if s.rec, err = readRecord(s.c, cfg.Bridge, kindBridge); err != nil {
		return err
	}
	if s.rec == nil {
		if s.rec, err = s.discoverPod(); err != nil {
			return err
		}
	}
	s.res = &Result{
		PodInterface: cfg.PodInterface,
		Bridge:       cfg.Bridge,
		Tap:          cfg.Tap,
		MAC:          s.rec.guestMAC,
		PodIP:        s.rec.addrs[0],
		GuestIP:      s.rec.addrs[0],
		MTU:          s.pod.Attrs().MTU,
	}
	for _, rt := range s.rec.routes {
		if rt.Dst.Bits() == 0 && rt.Gateway.IsValid() && !s.res.Gateway.IsValid() {
			s.res.Gateway = rt.Gateway
			continue
		}
		s.res.Routes = append(s.res.Routes, rt)
	}
	return nil
}

func (s *bridgeRun) discoverPod() (*record, error) {
	attrs := s.pod.Attrs()
	rec := &record{kind: kindBridge, podMAC: attrs.HardwareAddr, guestMAC: attrs.HardwareAddr}
	if s.b.cfg.MAC != nil {
		rec.guestMAC = s.b.cfg.MAC
	}
	addrs, err := s.c.addrs(s.pod)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if a.Scope == unix.RT_SCOPE_UNIVERSE {
			rec.addrs = append(rec.addrs, prefixFromIPNet(a.IPNet))
		}
	}
	if len(rec.addrs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoAddress, attrs.Name)
	}
	routes, err := s.c.routes(s.pod)
	if err != nil {
		return nil, err
	}
	for _, rt := range routes {
		// Routes the kernel made for the addresses come back with them; only the others
		// need recording.
		if rt.Protocol == unix.RTPROT_KERNEL || rt.Type != unix.RTN_UNICAST || rt.Table != unix.RT_TABLE_MAIN {
			continue
		}
		r := Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
		if rt.Dst != nil {
			r.Dst = prefixFromIPNet(rt.Dst)
		}
		if rt.Gw != nil {
			r.Gateway = addrFromIP(rt.Gw)
		}
		rec.routes = append(rec.routes, r)
	}
	return rec, nil
}

func (s *bridgeRun) bridge() error {
	alias, err := s.rec.encode()
	if err != nil {
		return err
	}
	// The bridge gets a MAC of its own so it does not take a port's (the guest's) and does not
	// change as ports come and go.
	s.br, err = s.c.ensureBridge(s.r, s.b.cfg.Bridge, s.res.MTU, randomMAC(), alias)
	if err != nil {
		return err
	}
	return s.c.setUp(s.r, s.br)
}

func (s *bridgeRun) serverAddress() error {
	added, err := s.c.ensureAddr(s.br, &netlink.Addr{IPNet: ipNet(s.b.cfg.ServerIP)})
	if err != nil {
		return err
	}
	if added {
		s.r.Add("server address", func() error {
			return s.c.nl.AddrDel(s.br, &netlink.Addr{IPNet: ipNet(s.b.cfg.ServerIP)})
		})
	}
	return nil
}

func (s *bridgeRun) tap() error {
	if _, err := s.c.ensureTap(s.r, TapConfig{Name: s.b.cfg.Tap, MTU: s.res.MTU, Owner: s.b.cfg.TapOwner}, false); err != nil {
		return err
	}
	tap, err := s.c.mustLink(s.b.cfg.Tap)
	if err != nil {
		return err
	}
	return s.c.setMaster(s.r, tap, s.br)
}

// podMAC gives the pod interface a new MAC: its own now belongs to the guest, and one MAC on
// both sides of the bridge would confuse the bridge's forwarding table.
func (s *bridgeRun) podMAC() error {
	cur := s.pod.Attrs().HardwareAddr
	if cur.String() != s.rec.guestMAC.String() && cur.String() != s.rec.podMAC.String() {
		return nil
	}
	if err := s.c.setMAC(s.pod, randomMAC()); err != nil {
		return err
	}
	s.r.Add("pod MAC", func() error { return s.c.setMAC(s.pod, cur) })
	return nil
}

// podAddresses removes the pod's IP from the pod interface: the guest answers for it now.
// Removing the last address also drops the routes through the interface; the undo puts both
// back.
func (s *bridgeRun) podAddresses() error {
	addrs, err := s.c.addrs(s.pod)
	if err != nil {
		return err
	}
	removed := false
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE {
			continue
		}
		if err := s.c.nl.AddrDel(s.pod, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove %s from %s: %w", a.IPNet, s.b.cfg.PodInterface, err)
		}
		removed = true
	}
	if removed {
		s.r.Add("pod addresses", func() error { return s.c.restorePod(s.pod, s.rec) })
	}
	return nil
}

func (s *bridgeRun) attachPod() error {
	if err := s.c.setMaster(s.r, s.pod, s.br); err != nil {
		return err
	}
	return s.c.setUp(s.r, s.pod)
}

func (s *bridgeRun) startDHCP() error {
	return s.b.dhcp.start(s.log, s.c.path, DHCPConfig{
		Interface:   s.b.cfg.Bridge,
		ServerIP:    s.b.cfg.ServerIP.Addr(),
		ClientMAC:   s.res.MAC,
		ClientIP:    s.res.GuestIP,
		Gateway:     s.res.Gateway,
		Routes:      s.res.Routes,
		MTU:         s.res.MTU,
		DHCPOptions: s.b.cfg.DHCP,
	}, s.r)
}

// Close stops the DHCP server and leaves the wiring in place.
func (b *BridgeBinding) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dhcp.stop()
}

// Teardown stops the DHCP server, gives the pod interface back its MAC, addresses and
// routes, and deletes the tap and the bridge. It goes on past failures and returns them all.
func (b *BridgeBinding) Teardown(ctx context.Context) error {
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
	rec, err := readRecord(c, b.cfg.Bridge, kindBridge)
	if err != nil {
		// Not our bridge: leave it and the pod interface alone.
		return errors.Join(append(errs, err)...)
	}
	if rec != nil {
		pod, err := c.mustLink(b.cfg.PodInterface)
		if err == nil {
			if pod.Attrs().MasterIndex != 0 {
				err = c.nl.LinkSetNoMaster(pod)
			}
			if err == nil && pod.Attrs().HardwareAddr.String() != rec.podMAC.String() {
				err = c.setMAC(pod, rec.podMAC)
			}
			if err == nil {
				err = c.restorePod(pod, rec)
			}
		}
		errs = append(errs, err)
	}
	errs = append(errs, c.delLink(b.cfg.Tap), c.delLink(b.cfg.Bridge))
	return errors.Join(errs...)
}

// readRecord returns the record on the bridge, nil when there is no bridge, or an error when
// the bridge is not one this binding kind made.
func readRecord(c *nsConn, bridge, kind string) (*record, error) {
	l, err := c.lookupLink(bridge)
	if err != nil || l == nil {
		return nil, err
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return nil, fmt.Errorf("%w: %s is a %s, not a bridge", ErrLinkConflict, bridge, l.Type())
	}
	if l.Attrs().Alias == "" {
		// Created by a run that stopped before it could label it: nothing was moved yet.
		return nil, nil
	}
	rec, err := decodeRecord(l.Attrs().Alias)
	if err != nil {
		return nil, fmt.Errorf("bridge %s: %w", bridge, err)
	}
	if rec.kind != kind {
		return nil, fmt.Errorf("%w: bridge %s belongs to a %s binding", ErrLinkConflict, bridge, rec.kind)
	}
	return rec, nil
}

// restorePod puts the recorded addresses and routes back on the pod interface.
func (c *nsConn) restorePod(pod netlink.Link, rec *record) error {
	if err := c.setUp(NewReverter(logr.Discard()), pod); err != nil {
		return err
	}
	for _, p := range rec.addrs {
		if _, err := c.ensureAddr(pod, &netlink.Addr{IPNet: ipNet(p)}); err != nil {
			return err
		}
	}
	for _, rt := range rec.routes {
		nr := &netlink.Route{LinkIndex: pod.Attrs().Index, Dst: ipNet(rt.Dst)}
		if rt.Gateway.IsValid() {
			nr.Gw = rt.Gateway.AsSlice()
		} else {
			nr.Scope = netlink.SCOPE_LINK
		}
		if err := c.nl.RouteReplace(nr); err != nil {
			return fmt.Errorf("restore route %s on %s: %w", rt.Dst, pod.Attrs().Name, err)
		}
	}
	return nil
}

// setMAC changes a link's MAC, taking the link down for drivers that refuse a live change.
func (c *nsConn) setMAC(l netlink.Link, mac net.HardwareAddr) error {
	err := c.nl.LinkSetHardwareAddr(l, mac)
	if errors.Is(err, unix.EBUSY) && l.Attrs().Flags&net.FlagUp != 0 {
		if err = c.nl.LinkSetDown(l); err == nil {
			err = c.nl.LinkSetHardwareAddr(l, mac)
			err = errors.Join(err, c.nl.LinkSetUp(l))
		}
	}
	if err != nil {
		return fmt.Errorf("set MAC of %s: %w", l.Attrs().Name, err)
	}
	return nil
}
