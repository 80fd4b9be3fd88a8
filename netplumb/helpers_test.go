package netplumb

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireRoot skips a test that creates namespaces and devices on a machine that cannot.
func requireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root; -short skips it")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and devices")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
}

var nsSeq atomic.Int32

// newNetNS creates a named network namespace for this test alone, with lo up, and removes it
// when the test ends.
func newNetNS(t testing.TB, role string) string {
	t.Helper()
	requireRoot(t)
	name := fmt.Sprintf("qvt-%s-%d-%d", role, os.Getpid(), nsSeq.Add(1))
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		if rerr := netns.Set(orig); rerr != nil {
			errc <- fmt.Errorf("back to the test's namespace: %w", rerr)
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	path := filepath.Join("/var/run/netns", name)
	withNL(t, path, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	})
	return path
}

// withNL runs fn with a netlink handle inside the namespace at path.
func withNL(t testing.TB, path string, fn func(h *netlink.Handle) error) {
	t.Helper()
	c, err := openNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := fn(c.nl); err != nil {
		t.Fatalf("in %s: %v", path, err)
	}
}

const (
	podIP    = "10.244.0.5/24"
	clientIP = "10.244.0.1/24"
	podMTU   = 1450
)

// podNetwork makes a "pod" namespace whose eth0 (10.244.0.5/24, default route via
// 10.244.0.1, MTU 1450) is a veth to eth0 of a "client" namespace (10.244.0.1/24), the way a
// CNI plugin leaves a pod. It returns both paths.
func podNetwork(t testing.TB) (pod, client string) {
	t.Helper()
	pod, client = newNetNS(t, "pod"), newNetNS(t, "client")
	clientNS, err := netns.GetFromPath(client)
	if err != nil {
		t.Fatal(err)
	}
	defer clientNS.Close()
	withNL(t, pod, func(h *netlink.Handle) error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "eth0"
		attrs.MTU = podMTU
		veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(clientNS)}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr(podIP)
		if err := h.AddrAdd(l, addr); err != nil {
			return err
		}
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("10.244.0.1")})
	})
	withNL(t, client, func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr(clientIP)
		if err := h.AddrAdd(l, addr); err != nil {
			return err
		}
		return h.LinkSetUp(l)
	})
	return pod, client
}

// snapshot describes what netplumb can change in a namespace, one sorted line per fact, with
// names instead of indexes so a recreated device compares equal.
func snapshot(t testing.TB, path string) string {
	t.Helper()
	var lines []string
	c, err := openNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	links, err := retryDump("links", c.nl.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	for _, l := range links {
		a := l.Attrs()
		lines = append(lines, fmt.Sprintf("link %s type=%s mac=%s mtu=%d up=%t master=%s alias=%q",
			a.Name, l.Type(), a.HardwareAddr, a.MTU, a.Flags&net.FlagUp != 0, names[a.MasterIndex], a.Alias))
		if tt, ok := l.(*netlink.Tuntap); ok {
			lines = append(lines, fmt.Sprintf("tap %s mode=%v flags=%#x owner=%d group=%d", a.Name, tt.Mode, tt.Flags, tt.Owner, tt.Group))
		}
		addrs, err := c.addrs(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, ad := range addrs {
			lines = append(lines, fmt.Sprintf("addr %s %s", a.Name, ad.IPNet))
		}
	}
	routes, err := retryDump("routes", func() ([]netlink.Route, error) { return c.nl.RouteList(nil, unix.AF_INET) })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		lines = append(lines, fmt.Sprintf("route %v via %v dev %s scope %v", r.Dst, r.Gw, names[r.LinkIndex], r.Scope))
	}
	fwd, err := c.readSysctl(ipForward)
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, "ip_forward "+fwd)
	conn, err := c.nft()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		lines = append(lines, "nft table "+tb.Name)
		chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name {
				continue
			}
			rules, err := conn.GetRules(tb, ch)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rules {
				var ex []string
				for _, e := range r.Exprs {
					ex = append(ex, fmt.Sprintf("%T%+v", e, e))
				}
				lines = append(lines, fmt.Sprintf("nft rule %s/%s #%d %s", tb.Name, ch.Name, i, strings.Join(ex, " ")))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// diffLines shows the lines only one side has.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d []string
	for l := range ma {
		if !mb[l] {
			d = append(d, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			d = append(d, "+ "+l)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

func requireSame(t testing.TB, what, want, got string) {
	t.Helper()
	if want != got {
		t.Fatalf("%s differs:\n%s", what, diffLines(want, got))
	}
}
