package handler

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/qvirt/qvirt/node/safepath"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestParseResolvConf(t *testing.T) {
	cases := map[string]struct {
		in   string
		want PodDNS
	}{
		"kubelet's": {
			"search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			PodDNS{Nameservers: addrs("10.96.0.10"), Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}},
		},
		"empty": {"", PodDNS{}},
		"comments, blanks, unknown keywords": {
			"# generated\n\n; old style\nnameserver 10.0.0.1 # trailing\ndomain example.com\nsortlist 10.0.0.0/8\nlookup file bind\n",
			PodDNS{Nameservers: addrs("10.0.0.1")},
		},
		"at most three nameservers, junk skipped": {
			"nameserver\nnameserver 10.0.0.1 10.0.0.2\nnameserver not-an-ip\nnameserver 999.1.1.1\nnameserver 0.0.0.0\nnameserver 224.0.0.1\n" +
				"nameserver fe80::1%eth0\nnameserver ::ffff:10.0.0.3\nnameserver fd00::53\nnameserver 10.0.0.4\nnameserver 10.0.0.5\n",
			PodDNS{Nameservers: addrs("10.0.0.3", "fd00::53", "10.0.0.4")},
		},
		"search: the last line counts, six names at most, junk skipped": {
			"search first.example\nsearch A.Example. bad_end_ -lead.example trail-.example a..b " + strings.Repeat("x", 64) + ".com" +
				" 1.2.3.4 _srv.example.com a.example b.example a.example c.example d.example e.example f.example\n",
			PodDNS{Searches: []string{"a.example", "_srv.example.com", "b.example", "c.example", "d.example", "e.example"}},
		},
		"control characters and shell": {
			"nameserver 10.0.0.1\x00\nsearch $(reboot) `id` ok.example \x1b[31m a;b c\n",
			PodDNS{Searches: []string{"ok.example", "a"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := parseResolvConf([]byte(tc.in))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestReadPodDNS(t *testing.T) {
	proc := t.TempDir()
	etc := filepath.Join(proc, "42", "root", "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(etc, "resolv.conf")
	if err := os.WriteFile(conf, []byte("search ns1.svc.cluster.local\nnameserver 10.96.0.10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dns, err := readPodDNS(proc, 42)
	if err != nil || !reflect.DeepEqual(dns, PodDNS{Nameservers: addrs("10.96.0.10"), Searches: []string{"ns1.svc.cluster.local"}}) {
		t.Fatalf("%+v, %v", dns, err)
	}

	// A file over the cap: the whole lines before it are used, and the error says so.
	big := "nameserver 10.96.0.10\n" + strings.Repeat("# padding padding padding\n", maxResolvConf/20) + "nameserver 10.0.0.9\n"
	if err := os.WriteFile(conf, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	dns, err = readPodDNS(proc, 42)
	if !errors.Is(err, safepath.ErrTooLarge) || !reflect.DeepEqual(dns.Nameservers, addrs("10.96.0.10")) {
		t.Fatalf("%+v, %v", dns, err)
	}

	// A link out of the container's root resolves inside it.
	outside := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(outside, []byte("nameserver 10.6.6.6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(conf)
	if err := os.Symlink(outside, conf); err != nil {
		t.Fatal(err)
	}
	if dns, err = readPodDNS(proc, 42); err == nil || len(dns.Nameservers) != 0 {
		t.Fatalf("followed a link out of the root: %+v, %v", dns, err)
	}
}
