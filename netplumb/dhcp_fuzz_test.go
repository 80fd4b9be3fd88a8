package netplumb

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// dhcpSeed is an encoded request of type typ from mac, for the fuzz corpus.
func dhcpSeed(f *testing.F, typ dhcpv4.MessageType, mac net.HardwareAddr, mods ...dhcpv4.Modifier) []byte {
	f.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		f.Fatal(err)
	}
	return m.ToBytes()
}

// FuzzDHCPHandlePacket feeds the DHCP server's packet handler, unrecovered, with arbitrary
// datagrams: it must never panic, and any reply must parse, answer the request's transaction,
// go to the VM's MAC and offer only the VM's configured address.
func FuzzDHCPHandlePacket(f *testing.F) {
	discover := dhcpSeed(f, dhcpv4.MessageTypeDiscover, guestMAC,
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList, dhcpv4.OptionClasslessStaticRoute))
	request := dhcpSeed(f, dhcpv4.MessageTypeRequest, guestMAC,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.2"))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.1"))))
	f.Add(discover)
	f.Add(request)
	f.Add(dhcpSeed(f, dhcpv4.MessageTypeRequest, guestMAC, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.9")))))
	f.Add(dhcpSeed(f, dhcpv4.MessageTypeInform, guestMAC, dhcpv4.WithClientIP(net.ParseIP("10.0.2.2"))))
	f.Add(dhcpSeed(f, dhcpv4.MessageTypeDiscover, otherMAC))
	f.Add(dhcpSeed(f, dhcpv4.MessageTypeRelease, guestMAC))
	// Truncated: nothing, a bare header, the header without the cookie, the options cut off.
	f.Add([]byte{})
	f.Add(discover[:1])
	f.Add(discover[:236])
	f.Add(discover[:240])
	f.Add(discover[:len(discover)-3])
	// Bad option lengths: one running past the end, a zero-length message type, no end option.
	head := bytes.Clone(discover[:240])
	f.Add(append(bytes.Clone(head), 53, 200, 1))
	f.Add(append(bytes.Clone(head), 53, 0, 255))
	f.Add(append(bytes.Clone(head), 53, 1, 1, 61, 7, 1))
	f.Add(append(bytes.Clone(head), 53, 1, 1, 119, 4, 0xc0, 0xff, 0xc0, 0x00, 255))
	// A hardware address length beyond the chaddr field.
	long := bytes.Clone(discover)
	long[2] = 255
	f.Add(long)

	cfg := testDHCPConfig()
	f.Fuzz(func(t *testing.T, pkt []byte) {
		out, typ, err := cfg.handlePacket(pkt)
		if out == nil {
			if err == nil {
				t.Fatal("no reply and no reason")
			}
			return
		}
		if err != nil {
			t.Fatalf("a reply and an error: %v", err)
		}
		req, err := dhcpv4.FromBytes(pkt)
		if err != nil {
			t.Fatalf("answered a request that does not parse: %v", err)
		}
		resp, err := dhcpv4.FromBytes(out)
		if err != nil {
			t.Fatalf("the reply does not parse: %v\n% x", err, out)
		}
		if resp.OpCode != dhcpv4.OpcodeBootReply || resp.MessageType() != typ {
			t.Fatalf("reply op %v type %v, handler said %v", resp.OpCode, resp.MessageType(), typ)
		}
		if resp.TransactionID != req.TransactionID || binary.BigEndian.Uint32(out[4:8]) != binary.BigEndian.Uint32(pkt[4:8]) {
			t.Fatalf("reply xid %v for request xid %v", resp.TransactionID, req.TransactionID)
		}
		if !bytes.Equal(resp.ClientHWAddr, guestMAC) {
			t.Fatalf("reply to MAC %v", resp.ClientHWAddr)
		}
		if !resp.ServerIdentifier().Equal(cfg.ServerIP.AsSlice()) {
			t.Fatalf("server identifier %v", resp.ServerIdentifier())
		}
		switch {
		case typ == dhcpv4.MessageTypeOffer, typ == dhcpv4.MessageTypeAck && req.MessageType() != dhcpv4.MessageTypeInform:
			if !resp.YourIPAddr.Equal(cfg.ClientIP.Addr().AsSlice()) {
				t.Fatalf("%v offers %v, not the VM's %v", typ, resp.YourIPAddr, cfg.ClientIP.Addr())
			}
		case typ == dhcpv4.MessageTypeAck, typ == dhcpv4.MessageTypeNak:
			if !resp.YourIPAddr.IsUnspecified() {
				t.Fatalf("%v to %v carries an address %v", typ, req.MessageType(), resp.YourIPAddr)
			}
		default:
			t.Fatalf("reply of type %v", typ)
		}
	})
}
