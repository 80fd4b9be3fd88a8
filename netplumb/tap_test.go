package netplumb

import (
	"context"
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tapIfreq asks the kernel which device and flags a tap descriptor is attached to.
func tapIfreq(t *testing.T, fd uintptr) (string, uint16) {
	t.Helper()
	ifr, err := unix.NewIfreq("")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(int(fd), unix.TUNGETIFF, ifr); err != nil {
		t.Fatalf("TUNGETIFF: %v", err)
	}
	return ifr.Name(), ifr.Uint16()
}

func TestOpenTapCreatesAndReuses(t *testing.T) {
	ns := newNetNS(t, "tap")
	ctx := context.Background()
	cfg := TapConfig{Name: "tap0", MTU: 1400, Owner: &Owner{UID: 107, GID: 107}}
	f, err := OpenTap(ctx, ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	name, flags := tapIfreq(t, f.Fd())
	if name != "tap0" || flags&(unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR|unix.IFF_MULTI_QUEUE) != unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR {
		t.Fatalf("descriptor attached to %q with flags %#x", name, flags)
	}
	var index int
	withNL(t, ns, func(h *netlink.Handle) error {
		l, err := h.LinkByName("tap0")
		if err != nil {
			return err
		}
		tt := l.(*netlink.Tuntap)
		index = tt.Index
		if tt.Mode != netlink.TUNTAP_MODE_TAP || tt.Flags&netlink.TUNTAP_VNET_HDR == 0 || tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 ||
			tt.Owner != 107 || tt.Group != 107 || tt.MTU != 1400 || tt.Flags&netlink.TUNTAP_NO_PI == 0 || tt.NonPersist {
			t.Errorf("tap0 = mode %v flags %#x owner %d group %d mtu %d nonpersist %t", tt.Mode, tt.Flags, tt.Owner, tt.Group, tt.MTU, tt.NonPersist)
		}
		if tt.RawFlags&unix.IFF_UP == 0 {
			t.Errorf("tap0 is not up")
		}
		return nil
	})
	if err := unix.Stat("/sys/class/net/tap0", &unix.Stat_t{}); err == nil {
		t.Errorf("tap0 was created in the test's namespace too")
	}

	// One queue: a second descriptor cannot attach while the first holds it.
	if _, err := OpenTap(ctx, ns, cfg); !errors.Is(err, ErrTapBusy) {
		t.Fatalf("second open while held: %v, want ErrTapBusy", err)
	}
	before := snapshot(t, ns)
	f.Close()
	f2, err := OpenTap(ctx, ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	requireSame(t, "namespace after reopening the tap", before, snapshot(t, ns))
	withNL(t, ns, func(h *netlink.Handle) error {
		l, err := h.LinkByName("tap0")
		if err == nil && l.Attrs().Index != index {
			t.Errorf("tap0 was recreated (index %d, was %d)", l.Attrs().Index, index)
		}
		return err
	})

	f2.Close()
	if err := DeleteLink(ns, "tap0"); err != nil {
		t.Fatal(err)
	}
	if err := DeleteLink(ns, "tap0"); err != nil {
		t.Fatalf("deleting a missing link: %v", err)
	}
}

func TestOpenTapRefusesOtherLinks(t *testing.T) {
	ns := newNetNS(t, "tapconflict")
	withNL(t, ns, func(h *netlink.Handle) error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "tap0"
		return h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
	})
	before := snapshot(t, ns)
	if _, err := OpenTap(context.Background(), ns, TapConfig{Name: "tap0"}); !errors.Is(err, ErrLinkConflict) {
		t.Fatalf("OpenTap over a bridge: %v, want ErrLinkConflict", err)
	}
	requireSame(t, "namespace after a refused tap", before, snapshot(t, ns))
}
