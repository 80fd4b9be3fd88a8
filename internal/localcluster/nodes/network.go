package nodes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// CreateBridge creates the host bridge with the host's address (or finds it from an earlier
// start). It comes first: kube-apiserver and the registry listen on that address.
func (nw Network) CreateBridge() error { return ensureBridge(nw) }

func ensureBridge(nw Network) error {
	name := nw.Bridge()
	link, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return err
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("bridge %s: %w", name, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return err
		}
	}
	if _, ok := link.(*netlink.Bridge); !ok {
		return fmt.Errorf("%s exists and is a %s, not a bridge", name, link.Type())
	}
	addr := &netlink.Addr{IPNet: ipNet(nw.HostPrefix())}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("address of %s: %w", name, err)
	}
	return netlink.LinkSetUp(link)
}

// deleteBridge removes the host bridge with the nodes' host-side links and the host's routes to pod
// subnets. A node's network namespace lives on after its last process while the kernel still
// closes its connections (orphaned sockets hold it), so the links first get a few seconds to go
// with their namespaces; then they are deleted, which leaves such a namespace without a link.
func deleteBridge(nw Network) error {
	prefix := fmt.Sprintf("qvn%d-", nw.Index)
	deadline := time.Now().Add(10 * time.Second)
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		var left []netlink.Link
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, prefix) {
				left = append(left, l)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, l := range left {
				if err := netlink.LinkDel(l); err != nil {
					return fmt.Errorf("link %s: %w", l.Attrs().Name, err)
				}
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	link, err := netlink.LinkByName(nw.Bridge())
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(link)
}

// wireNode links the namespace of pid (the node's holder) to the bridge: eth0 inside with the node's
// address, a route to every other node's pod subnet through that node, and on the host a route to
// this node's pod subnet. Nothing routes anywhere else.
func wireNode(nw Network, i, pid int, peers []netip.Addr) error {
	br, err := netlink.LinkByName(nw.Bridge())
	if err != nil {
		return err
	}
	target, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of pid %d: %w", pid, err)
	}
	defer target.Close()
	hostSide := nw.hostVeth(i)
	if old, err := netlink.LinkByName(hostSide); err == nil {
		_ = netlink.LinkDel(old) // a link left by a node that was restarted
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostSide, MasterIndex: br.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(target)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("link %s: %w", hostSide, err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, name := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s in the node: %w", name, err)
		}
		if name == "eth0" {
			if err := h.AddrReplace(l, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(nw.NodeAddr(i), 24))}); err != nil {
				return err
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
	}
	eth0, _ := h.LinkByName("eth0")
	for j, gw := range peers {
		if j == i {
			continue
		}
		r := &netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipNet(nw.PodSubnet(j)), Gw: gw.AsSlice()}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("route to %s: %w", nw.PodSubnet(j), err)
		}
	}
	r := &netlink.Route{LinkIndex: br.Attrs().Index, Dst: ipNet(nw.PodSubnet(i)), Gw: nw.NodeAddr(i).AsSlice()}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("host route to %s: %w", nw.PodSubnet(i), err)
	}
	return nil
}
