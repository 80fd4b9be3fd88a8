package netplumb

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/google/nftables"
)

func natRuleCount(t *testing.T, ns, table, chain string) int {
	t.Helper()
	c, err := openNS(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := c.nft()
	if err != nil {
		t.Fatal(err)
	}
	tb := &nftables.Table{Name: table, Family: nftables.TableFamilyIPv4}
	rules, err := conn.GetRules(tb, &nftables.Chain{Name: chain, Table: tb})
	if err != nil {
		t.Fatal(err)
	}
	return len(rules)
}

func TestMasqueradeBindingIdempotentAndTornDown(t *testing.T) {
	pod, client := podNetwork(t)
	ctx := context.Background()
	before, clientBefore := snapshot(t, pod), snapshot(t, client)
	if !strings.Contains(before, "ip_forward 0") {
		t.Fatalf("a new namespace forwards already:\n%s", before)
	}

	b := NewMasqueradeBinding(pod, MasqueradeConfig{})
	defer b.Close()
	res, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.MAC) != 6 || res.MAC[0]&3 != 2 {
		t.Fatalf("guest MAC %s is not a locally administered unicast address", res.MAC)
	}
	want := &Result{
		PodInterface: "eth0", Bridge: "k6t-eth0", Tap: "tap0", MAC: res.MAC,
		PodIP: netip.MustParsePrefix(podIP), GuestIP: netip.MustParsePrefix("10.0.2.2/24"),
		Gateway: netip.MustParseAddr("10.0.2.1"), MTU: podMTU,
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("result %+v\nwant %+v", res, want)
	}
	after := snapshot(t, pod)
	for _, line := range []string{"ip_forward 1", "addr k6t-eth0 10.0.2.1/24", "addr eth0 10.244.0.5/24", "nft table qvirt-k6t-eth0"} {
		if !strings.Contains(after, line) {
			t.Errorf("no %q after Setup:\n%s", line, after)
		}
	}
	// Forwarding and NAT are the pod's alone.
	requireSame(t, "another namespace", clientBefore, snapshot(t, client))
	// No ports declared: one rule forwards everything for the pod's IP.
	if n := natRuleCount(t, pod, "qvirt-k6t-eth0", "prerouting"); n != 1 {
		t.Errorf("%d prerouting rules, want 1", n)
	}

	if _, err := b.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	requireSame(t, "namespace after a second Setup", after, snapshot(t, pod))
	b2 := NewMasqueradeBinding(pod, MasqueradeConfig{})
	res2, err := b2.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b2.Close()
	requireSame(t, "namespace after Setup by a new binding", after, snapshot(t, pod))
	if !reflect.DeepEqual(res2, want) {
		t.Fatalf("a new binding gave %+v; the guest MAC must survive", res2)
	}

	if err := b.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	requireSame(t, "namespace after Teardown", before, snapshot(t, pod))
	if err := b.Teardown(ctx); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
}

func TestMasqueradeBindingPorts(t *testing.T) {
	pod, _ := podNetwork(t)
	ctx := context.Background()
	b := NewMasqueradeBinding(pod, MasqueradeConfig{Ports: []Port{{TCP, 80}, {UDP, 53}, {TCP, 22}}})
	defer b.Close()
	if _, err := b.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := natRuleCount(t, pod, "qvirt-k6t-eth0", "prerouting"); n != 3 {
		t.Errorf("%d prerouting rules, want one per port", n)
	}
	// Changed ports replace the rules rather than adding to them.
	b2 := NewMasqueradeBinding(pod, MasqueradeConfig{Ports: []Port{{TCP, 80}}})
	if _, err := b2.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	b2.Close()
	if n := natRuleCount(t, pod, "qvirt-k6t-eth0", "prerouting"); n != 1 {
		t.Errorf("%d prerouting rules after narrowing to one port", n)
	}
	if err := b.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMasqueradeBindingRevertsFailedSetup(t *testing.T) {
	for i, s := range NewMasqueradeBinding("", MasqueradeConfig{}).steps {
		t.Run("after "+s.name, func(t *testing.T) {
			pod, _ := podNetwork(t)
			before := snapshot(t, pod)
			b := NewMasqueradeBinding(pod, MasqueradeConfig{})
			fail := masqStep{"fail", func(*masqRun) error { return errInjected }}
			b.steps = append(b.steps[:i+1:i+1], append([]masqStep{fail}, b.steps[i+1:]...)...)
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

// A Setup that fails on a namespace already wired leaves the earlier wiring alone.
func TestMasqueradeBindingFailedResetupKeepsWiring(t *testing.T) {
	pod, _ := podNetwork(t)
	ctx := context.Background()
	b := NewMasqueradeBinding(pod, MasqueradeConfig{})
	defer b.Teardown(ctx)
	if _, err := b.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	wired := snapshot(t, pod)
	b2 := NewMasqueradeBinding(pod, MasqueradeConfig{})
	b2.steps = append(b2.steps, masqStep{"fail", func(*masqRun) error { return errInjected }})
	if _, err := b2.Setup(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Setup: %v", err)
	}
	requireSame(t, "namespace after a failed second Setup", wired, snapshot(t, pod))
}

func TestBindingsRefuseEachOthersBridge(t *testing.T) {
	pod, _ := podNetwork(t)
	ctx := context.Background()
	m := NewMasqueradeBinding(pod, MasqueradeConfig{})
	if _, err := m.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Teardown(ctx)
	wired := snapshot(t, pod)
	b := NewBridgeBinding(pod, BridgeConfig{})
	if _, err := b.Setup(ctx); !errors.Is(err, ErrLinkConflict) {
		t.Fatalf("bridge Setup over a masquerade bridge: %v, want ErrLinkConflict", err)
	}
	if err := b.Teardown(ctx); !errors.Is(err, ErrLinkConflict) {
		t.Fatalf("bridge Teardown of a masquerade bridge: %v, want ErrLinkConflict", err)
	}
	requireSame(t, "namespace", wired, snapshot(t, pod))
}
