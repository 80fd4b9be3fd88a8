package netplumb

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestEncodeDomainSearch(t *testing.T) {
	// RFC 3397's example list, written out without the compression pointers the RFC shows.
	got := encodeDomainSearch([]string{"eng.apple.com", "marketing.apple.com"})
	want := []byte("\x03eng\x05apple\x03com\x00\x09marketing\x05apple\x03com\x00")
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	// A trailing dot is the same name; junk (an empty name or label, a label over 63 bytes) is
	// left out.
	got = encodeDomainSearch([]string{"cluster.local.", "", "a..b", strings.Repeat("x", 64) + ".com", "svc.cluster.local"})
	want = []byte("\x07cluster\x05local\x00\x03svc\x07cluster\x05local\x00")
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	// A name that would take the option past 255 bytes is dropped; a shorter one after it fits.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) // 193 bytes encoded
	got = encodeDomainSearch([]string{long, strings.Replace(long, "a", "d", -1), "z"})
	want = []byte("\x3f" + strings.Repeat("a", 63) + "\x3f" + strings.Repeat("b", 63) + "\x3f" + strings.Repeat("c", 63) + "\x00\x01z\x00")
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	if len(got) > maxOptionLen {
		t.Fatalf("%d bytes, over one option", len(got))
	}
	if encodeDomainSearch(nil) != nil {
		t.Fatal("an empty list encodes to something")
	}
}

// TestDHCPDNSOptions: a lease carries the resolvers (IPv4 only), the domain name and the search
// list as exact option bytes.
func TestDHCPDNSOptions(t *testing.T) {
	cfg := testDHCPConfig()
	cfg.DNS = []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10"), netip.MustParseAddr("1.1.1.1")}
	cfg.DomainName = "ns1.svc.cluster.local"
	cfg.SearchDomains = []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	offer := cfg.reply(request(t, dhcpv4.MessageTypeDiscover, guestMAC))
	if offer == nil {
		t.Fatal("no offer")
	}
	// The reply is parsed back from its bytes, as a guest gets it.
	parsed, err := dhcpv4.FromBytes(offer.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := parsed.Options.Get(dhcpv4.OptionDomainNameServer); !bytes.Equal(got, []byte{10, 96, 0, 10, 1, 1, 1, 1}) {
		t.Errorf("option 6: % x", got)
	}
	if got := parsed.Options.Get(dhcpv4.OptionDomainName); string(got) != "ns1.svc.cluster.local" {
		t.Errorf("option 15: %q", got)
	}
	want := []byte("\x03ns1\x03svc\x07cluster\x05local\x00\x03svc\x07cluster\x05local\x00\x07cluster\x05local\x00")
	if got := parsed.Options.Get(dhcpv4.OptionDNSDomainSearchList); !bytes.Equal(got, want) {
		t.Errorf("option 119:\n% x\nwant\n% x", got, want)
	}
	if ds := parsed.DomainSearch(); ds == nil || strings.Join(ds.Labels, " ") != "ns1.svc.cluster.local svc.cluster.local cluster.local" {
		t.Errorf("option 119 decodes to %v", ds)
	}
	if dns := parsed.DNS(); len(dns) != 2 || !dns[0].Equal(net.ParseIP("10.96.0.10")) {
		t.Errorf("DNS %v", dns)
	}

	// Nothing to say, nothing sent.
	cfg.DNS, cfg.DomainName, cfg.SearchDomains = nil, "", nil
	offer = cfg.reply(request(t, dhcpv4.MessageTypeDiscover, guestMAC))
	for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionDomainNameServer, dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList} {
		if offer.Options.Has(o) {
			t.Errorf("option %v sent without a value", o)
		}
	}
}
