package handler

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/qvirt/qvirt/node/safepath"
)

// PodDNS is the launcher pod's resolver configuration, which the guest's DHCP lease passes on
// as KubeVirt's does. Every entry has been checked: an address, a DNS name.
type PodDNS struct {
	// Nameservers in the file's order, IPv4 and IPv6, at most maxNameservers.
	Nameservers []netip.Addr
	// Searches is the search list, lower case, at most maxSearches.
	Searches []string
}

// Limits on what is taken from the pod's resolv.conf, whose content the VM's owner chooses
// (the pod's dnsConfig): the resolver's own (glibc reads 3 nameservers; it long read 6 search
// domains, and the lease has room for little more), and a size far above any real file.
const (
	maxResolvConf  = 16 << 10
	maxNameservers = 3
	maxSearches    = 6
)

// searchDomainRE is a DNS name as a search domain may be: lower-case labels of letters, digits
// and hyphens (a leading underscore allowed), the last starting with a letter, as KubeVirt
// checks them.
var searchDomainRE = regexp.MustCompile(`^(?:[_a-z0-9](?:[_a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// readPodDNS reads /etc/resolv.conf of the launcher whose pid is given, inside its container's
// root: links in it resolve there, never in the node agent's root. A file over maxResolvConf is
// read up to that size.
func readPodDNS(procRoot string, pid int) (PodDNS, error) {
	root := filepath.Join(procRoot, strconv.Itoa(pid), "root")
	b, err := safepath.ReadFileInRoot(root, "etc/resolv.conf", maxResolvConf)
	if errors.Is(err, safepath.ErrTooLarge) {
		// Keep the whole lines that were read; the error still says the file was cut.
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i+1]
		} else {
			b = nil
		}
		return parseResolvConf(b), err
	}
	if err != nil {
		return PodDNS{}, fmt.Errorf("the launcher pod's resolv.conf: %w", err)
	}
	return parseResolvConf(b), nil
}

// parseResolvConf takes the nameservers and the search list from a resolv.conf. Lines it cannot
// use are skipped, and so is any entry that is not a valid address or name; as in the guest's
// resolver, the last search line is the one that counts.
func parseResolvConf(b []byte) PodDNS {
	var dns PodDNS
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) != 2 || len(dns.Nameservers) == maxNameservers {
				continue
			}
			a, err := netip.ParseAddr(f[1])
			if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
				continue
			}
			dns.Nameservers = append(dns.Nameservers, a.Unmap())
		case "search":
			dns.Searches = nil
			seen := map[string]bool{}
			for _, d := range f[1:] {
				d = strings.TrimSuffix(strings.ToLower(d), ".")
				if len(dns.Searches) == maxSearches || len(d) > 253 || !searchDomainRE.MatchString(d) || seen[d] {
					continue
				}
				seen[d] = true
				dns.Searches = append(dns.Searches, d)
			}
		}
	}
	return dns
}
