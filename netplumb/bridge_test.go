package netplumb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink"
)

func podLink(t *testing.T, ns, name string) netlink.Link {
	t.Helper()
	var l netlink.Link
	withNL(t, ns, func(h *netlink.Handle) error {
		var err error
		l, err = h.LinkByName(name)
		return err
	})
	return l
}

func linkAddrs(t *testing.T, ns, name string) []string {
	t.Helper()
	var out []string
	c, err := openNS(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.mustLink(name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := c.addrs(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		out = append(out, a.IPNet.String())
	}
	return out
}

func TestBridgeBindingIdempotentAndTornDown(t *testing.T) {
	pod, _ := podNetwork(t)
	ctx := context.Background()
	before := snapshot(t, pod)
	podMAC := podLink(t, pod, "eth0").Attrs().HardwareAddr

	b := NewBridgeBinding(pod, BridgeConfig{TapOwner: &Owner{UID: 107, GID: 107}})
	defer b.Close()
	res, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &Result{
		PodInterface: "eth0", Bridge: "k6t-eth0", Tap: "tap0", MAC: podMAC,
		PodIP: netip.MustParsePrefix(podIP), GuestIP: netip.MustParsePrefix(podIP),
		Gateway: netip.MustParseAddr("10.244.0.1"), MTU: podMTU,
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v\nwant %+v", res, want)
	}

	eth0, tap, br := podLink(t, pod, "eth0"), podLink(t, pod, "tap0"), podLink(t, pod, "k6t-eth0")
	if eth0.Attrs().HardwareAddr.String() == podMAC.String() {
		t.Error("eth0 kept the MAC that now belongs to the guest")
	}
	if br.Attrs().HardwareAddr.String() == podMAC.String() {
		t.Error("the bridge has the guest's MAC")
	}
	if eth0.Attrs().MasterIndex != br.Attrs().Index || tap.Attrs().MasterIndex != br.Attrs().Index {
		t.Errorf("eth0 master %d, tap0 master %d, bridge %d", eth0.Attrs().MasterIndex, tap.Attrs().MasterIndex, br.Attrs().Index)
	}
	if a := linkAddrs(t, pod, "eth0"); len(a) != 0 {
		t.Errorf("eth0 still has %v", a)
	}
	if a := linkAddrs(t, pod, "k6t-eth0"); !reflect.DeepEqual(a, []string{"169.254.75.10/32"}) {
		t.Errorf("bridge addresses %v", a)
	}
	if tt := tap.(*netlink.Tuntap); tt.MTU != podMTU || tt.Owner != 107 || tt.Flags&netlink.TUNTAP_VNET_HDR == 0 {
		t.Errorf("tap0 mtu %d owner %d flags %#x", tt.MTU, tt.Owner, tt.Flags)
	}
	after := snapshot(t, pod)

	// Again with the same binding, and from a fresh one as a restarted agent would: the same
	// state, the same answer (the pod's MAC and IP are read back from the bridge's record).
	res2, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, "namespace after a second Setup", after, snapshot(t, pod))
	if !reflect.DeepEqual(res2, want) {
		t.Fatalf("second result %+v", res2)
	}
	b2 := NewBridgeBinding(pod, BridgeConfig{TapOwner: &Owner{UID: 107, GID: 107}})
	res3, err := b2.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	requireSame(t, "namespace after Setup by a new binding", after, snapshot(t, pod))
	if !reflect.DeepEqual(res3, want) {
		t.Fatalf("result of a new binding %+v", res3)
	}

	// QEMU holding the tap does not stop a Setup.
	f, err := OpenTap(ctx, pod, TapConfig{Name: res.Tap})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Setup(ctx); err != nil {
		t.Fatalf("Setup while the tap is held: %v", err)
	}
	f.Close()
	requireSame(t, "namespace after Setup with the tap held", after, snapshot(t, pod))

	if err := b.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	requireSame(t, "namespace after Teardown", before, snapshot(t, pod))
	if err := b.Teardown(ctx); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	requireSame(t, "namespace after a second Teardown", before, snapshot(t, pod))

	gone := NewBridgeBinding(filepath.Join(t.TempDir(), "deleted-netns"), BridgeConfig{})
	if err := gone.Teardown(ctx); err != nil {
		t.Fatalf("Teardown in a namespace that is gone: %v", err)
	}
	if _, err := gone.Setup(ctx); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Setup in a namespace that is gone: %v, want os.ErrNotExist", err)
	}
}

var errInjected = errors.New("injected failure")

// TestBridgeBindingRevertsFailedSetup fails Setup after each of its steps in turn: every time
// the namespace must be as it was and no DHCP server left running.
func TestBridgeBindingRevertsFailedSetup(t *testing.T) {
	for i := range NewBridgeBinding("", BridgeConfig{}).steps {
		b0 := NewBridgeBinding("", BridgeConfig{})
		t.Run("after "+b0.steps[i].name, func(t *testing.T) {
			pod, _ := podNetwork(t)
			before := snapshot(t, pod)
			b := NewBridgeBinding(pod, BridgeConfig{})
			fail := bridgeStep{"fail", func(*bridgeRun) error { return errInjected }}
			b.steps = append(b.steps[:i+1:i+1], append([]bridgeStep{fail}, b.steps[i+1:]...)...)
			if _, err := b.Setup(context.Background()); !errors.Is(err, errInjected) {
				t.Fatalf("Setup: %v, want the injected failure", err)
			}
			requireSame(t, "namespace after a failed Setup", before, snapshot(t, pod))
			if b.dhcp.running() {
				t.Fatal("a DHCP server outlived the failed Setup")
			}
		})
	}
}

func TestBridgeBindingConflicts(t *testing.T) {
	pod, _ := podNetwork(t)
	ctx := context.Background()
	withNL(t, pod, func(h *netlink.Handle) error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "tap0"
		return h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
	})
	before := snapshot(t, pod)
	b := NewBridgeBinding(pod, BridgeConfig{})
	if _, err := b.Setup(ctx); !errors.Is(err, ErrLinkConflict) {
		t.Fatalf("Setup with tap0 taken by a bridge: %v, want ErrLinkConflict", err)
	}
	requireSame(t, "namespace after a refused Setup", before, snapshot(t, pod))

	// A bridge of that name that netplumb did not label is not torn down.
	withNL(t, pod, func(h *netlink.Handle) error {
		l, err := h.LinkByName("tap0")
		if err != nil {
			return err
		}
		if err := h.LinkDel(l); err != nil {
			return err
		}
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "k6t-eth0"
		attrs.Alias = "someone else's"
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return err
		}
		br, err := h.LinkByName("k6t-eth0")
		if err != nil {
			return err
		}
		return h.LinkSetAlias(br, "someone else's")
	})
	before = snapshot(t, pod)
	if err := b.Teardown(ctx); !errors.Is(err, ErrRecord) {
		t.Fatalf("Teardown of a foreign bridge: %v, want ErrRecord", err)
	}
	if _, err := b.Setup(ctx); !errors.Is(err, ErrRecord) {
		t.Fatalf("Setup over a foreign bridge: %v, want ErrRecord", err)
	}
	requireSame(t, "namespace after refusing a foreign bridge", before, snapshot(t, pod))
}

func TestBridgeBindingNeedsAnAddress(t *testing.T) {
	ns := newNetNS(t, "noaddr")
	withNL(t, ns, func(h *netlink.Handle) error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "eth0"
		return h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "peer0"})
	})
	before := snapshot(t, ns)
	_, err := NewBridgeBinding(ns, BridgeConfig{}).Setup(context.Background())
	if !errors.Is(err, ErrNoAddress) {
		t.Fatalf("Setup: %v, want ErrNoAddress", err)
	}
	requireSame(t, "namespace", before, snapshot(t, ns))
	if _, err := NewBridgeBinding(ns, BridgeConfig{PodInterface: "eth9"}).Setup(context.Background()); !errors.Is(err, ErrLinkNotFound) {
		t.Fatalf("Setup without the pod interface: %v, want ErrLinkNotFound", err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := &record{
		kind:     kindBridge,
		guestMAC: net.HardwareAddr{2, 0, 0, 1, 2, 3},
		podMAC:   net.HardwareAddr{2, 0, 0, 1, 2, 4},
		addrs:    []netip.Prefix{netip.MustParsePrefix("10.244.0.5/32")},
		routes: []Route{
			{Dst: netip.MustParsePrefix("169.254.1.1/32")},
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("169.254.1.1")},
		},
		forward: "0",
	}
	s, err := r.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("%q decoded to %+v", s, got)
	}
	for i := range 20 {
		r.routes = append(r.routes, Route{Dst: netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", i)), Gateway: netip.MustParseAddr("10.244.0.1")})
	}
	if _, err := r.encode(); !errors.Is(err, ErrRecord) {
		t.Fatalf("an oversized record: %v, want ErrRecord", err)
	}
	for _, bad := range []string{"", "something else", recordMagic + " kind=bridge", recordMagic + " kind=bridge guest=zz"} {
		if _, err := decodeRecord(bad); !errors.Is(err, ErrRecord) {
			t.Errorf("decode %q: %v, want ErrRecord", bad, err)
		}
	}
}
