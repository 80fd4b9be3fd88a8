package netplumb

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// TestMasqueradeCIDRAndDNSWithGuest boots the tiny guest behind a masquerade binding on a
// subnet of its own (a pod network's vmNetworkCIDR, 10.11.0.0/24): the guest takes the
// subnet's second address with the first as its gateway, is reached through the pod's IP and
// goes out as it, and writes the lease's resolvers and search list (options 6 and 119) into its
// /etc/resolv.conf.
func TestMasqueradeCIDRAndDNSWithGuest(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	pod, client := podNetwork(t)
	ctx := context.Background()

	b := NewMasqueradeBinding(pod, MasqueradeConfig{
		Gateway: netip.MustParsePrefix("10.11.0.1/24"),
		GuestIP: netip.MustParseAddr("10.11.0.2"),
		Ports:   []Port{{TCP, 80}},
		DHCP: DHCPOptions{
			DNS:           []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11")},
			DomainName:    "ns1.svc.cluster.local",
			SearchDomains: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Hostname:      "dnsguest",
		},
	})
	res, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Teardown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if res.GuestIP.String() != "10.11.0.2/24" || res.Gateway.String() != "10.11.0.1" {
		t.Fatalf("result %+v", res)
	}
	tap, err := OpenTap(ctx, pod, TapConfig{Name: res.Tap})
	if err != nil {
		t.Fatal(err)
	}
	con := bootGuest(t, g, res.MAC, tap)
	tap.Close()

	if err := con.WaitFor(within(t, 2*time.Minute), "qvirt-guest: ip=10.11.0.2"); err != nil {
		t.Fatal(err)
	}
	// One line, so that neither the typed command nor line endings get in the way.
	if err := con.Type("tr '\\n' '|' </etc/resolv.conf; echo; ip route show default | tr -s ' ' '_'\n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"search ns1.svc.cluster.local svc.cluster.local cluster.local|nameserver 10.96.0.10|nameserver 10.96.0.11|",
		"default_via_10.11.0.1_dev_eth0",
	} {
		if err := con.WaitFor(within(t, 30*time.Second), want); err != nil {
			t.Fatal(err)
		}
	}
	body, err := fetch(within(t, time.Minute), client, "http://10.244.0.5:80/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "qvirt-guest ") {
		t.Fatalf("http://10.244.0.5:80/ answered %q, not the guest's page", body)
	}
	serveWhoAmI(t, client, "10.244.0.1:8080")
	guestFetch(t, con, "10.244.0.1:8080", "seen-from=10.244.0.5")
}
