package podnet

import (
	"net/netip"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/node/handler"
)

func TestDHCPOptionsFromThePodsDNS(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1"}}
	pod := handler.PodDNS{
		Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		Searches:    []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"},
	}
	o := dhcpOptions(vmi, pod)
	if o.Hostname != "vm1" || !reflect.DeepEqual(o.DNS, pod.Nameservers) || !reflect.DeepEqual(o.SearchDomains, pod.Searches) ||
		o.DomainName != "ns1.svc.cluster.local" {
		t.Fatalf("%+v", o)
	}

	// The VMI's subdomain goes first, under the longest service domain.
	vmi.Spec.Subdomain, vmi.Spec.Hostname = "mysub", "myhost"
	o = dhcpOptions(vmi, pod)
	want := []string{"mysub.ns1.svc.cluster.local", "ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	if o.Hostname != "myhost" || !reflect.DeepEqual(o.SearchDomains, want) || o.DomainName != "mysub.ns1.svc.cluster.local" {
		t.Fatalf("with a subdomain: %+v", o)
	}
	// Not twice.
	o = dhcpOptions(vmi, handler.PodDNS{Searches: want})
	if !reflect.DeepEqual(o.SearchDomains, want) {
		t.Fatalf("subdomain added again: %v", o.SearchDomains)
	}

	// Nothing read: KubeVirt's fallbacks.
	o = dhcpOptions(&v1.VirtualMachineInstance{}, handler.PodDNS{})
	if !reflect.DeepEqual(o.DNS, []netip.Addr{netip.MustParseAddr("8.8.8.8")}) || !reflect.DeepEqual(o.SearchDomains, []string{"cluster.local"}) ||
		o.DomainName != "cluster.local" {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestMasqueradeAddrs(t *testing.T) {
	for cidr, want := range map[string][2]string{
		"":               {"invalid Prefix", "invalid IP"},
		"10.0.2.0/24":    {"10.0.2.1/24", "10.0.2.2"},
		"192.168.7.0/30": {"192.168.7.1/30", "192.168.7.2"},
		"172.16.5.77/16": {"172.16.0.1/16", "172.16.0.2"}, // host bits ignored, as KubeVirt does
	} {
		gw, guest, err := masqueradeAddrs(cidr)
		if err != nil || gw.String() != want[0] || guest.String() != want[1] {
			t.Errorf("%q: %v %v %v, want %v", cidr, gw, guest, err, want)
		}
	}
	for _, bad := range []string{"10.0.2.0/31", "10.0.2.1/32", "fd10::/64", "10.0.2.0", "nonsense"} {
		if gw, guest, err := masqueradeAddrs(bad); err == nil {
			t.Errorf("%q accepted: %v %v", bad, gw, guest)
		}
	}
}
