package podnet

import (
	"net/netip"
	"strings"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/netplumb"
	"github.com/qvirt/qvirt/node/handler"
)

// KubeVirt's fallbacks when the pod's resolv.conf names no resolver or no search domain.
var (
	defaultNameserver   = netip.MustParseAddr("8.8.8.8")
	defaultSearchDomain = "cluster.local"
)

// dhcpOptions is what the guest's lease carries besides its address, as KubeVirt's DHCP server
// hands it: the pod's resolvers and search list, the VMI's subdomain in front of the search
// list, the longest search domain as the domain name, and the hostname.
func dhcpOptions(vmi *v1.VirtualMachineInstance, dns handler.PodDNS) netplumb.DHCPOptions {
	o := netplumb.DHCPOptions{Hostname: hostname(vmi), DNS: dns.Nameservers, SearchDomains: dns.Searches}
	if len(o.DNS) == 0 {
		o.DNS = []netip.Addr{defaultNameserver}
	}
	if len(o.SearchDomains) == 0 {
		o.SearchDomains = []string{defaultSearchDomain}
	}
	if d := subdomainDomain(o.SearchDomains, vmi.Spec.Subdomain); d != "" {
		o.SearchDomains = append([]string{d}, o.SearchDomains...)
	}
	o.DomainName = longest(o.SearchDomains)
	return o
}

// subdomainDomain is <subdomain>.<the longest service search domain>, the name the VMI has
// under its headless service, unless the search list has it already. The kubelet leaves it out
// of the pod's resolv.conf (old resolvers took 6 domains at most), so KubeVirt adds it.
func subdomainDomain(searches []string, subdomain string) string {
	if subdomain == "" {
		return ""
	}
	var services []string
	for _, d := range searches {
		if strings.Contains(d, ".svc.") {
			services = append(services, d)
		}
	}
	d := longest(services)
	if d == "" || strings.HasPrefix(d, subdomain+".") {
		return ""
	}
	return subdomain + "." + d
}

func longest(ds []string) string {
	sel := ""
	for _, d := range ds {
		if len(d) > len(sel) {
			sel = d
		}
	}
	return sel
}
