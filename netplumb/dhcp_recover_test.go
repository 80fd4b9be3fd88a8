package netplumb

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestDHCPServerSurvivesPanics serves two VMs on loopback sockets. A packet that makes one
// server's handler panic is dropped and logged with that VM's identity; the same server answers
// the next packet, and the other VM's server never notices.
func TestDHCPServerSurvivesPanics(t *testing.T) {
	var logs syncBuffer
	log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})

	start := func(log logr.Logger, handle func(*DHCPConfig, []byte) ([]byte, dhcpv4.MessageType, error)) (*DHCPServer, *net.UDPConn) {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		s := newDHCPServer(log, testDHCPConfig(), conn)
		if handle != nil {
			s.handlePacket = handle
		}
		go s.run()
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		client, err := net.DialUDP("udp4", nil, conn.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		return s, client
	}
	var armed atomic.Bool
	armed.Store(true)
	bad, badClient := start(log.WithValues("vmi", "ns1/victim", "vmiUID", "uid-1"), func(c *DHCPConfig, pkt []byte) ([]byte, dhcpv4.MessageType, error) {
		if armed.CompareAndSwap(true, false) {
			var m map[string]int
			m["boom"]++ // a nil map write: a runtime panic like any parser bug
		}
		return c.handlePacket(pkt)
	})
	good, goodClient := start(log.WithValues("vmi", "ns1/bystander"), nil)

	discover, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover), dhcpv4.WithHwAddr(guestMAC))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(c *net.UDPConn) *dhcpv4.DHCPv4 {
		t.Helper()
		if _, err := c.Write(discover.ToBytes()); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatalf("reply: %v", err)
		}
		return m
	}

	if r := ask(badClient); r != nil {
		t.Fatalf("the packet whose handling panicked was answered: %s", r.Summary())
	}
	if bad.panics.Load() != 1 {
		t.Fatalf("%d panics recovered, want 1", bad.panics.Load())
	}
	if r := ask(badClient); r == nil || r.MessageType() != dhcpv4.MessageTypeOffer || r.TransactionID != discover.TransactionID {
		t.Fatalf("after the panic, the server answered %v", r)
	}
	if r := ask(goodClient); r == nil || r.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("the other VM's server answered %v", r)
	}
	if good.panics.Load() != 0 {
		t.Fatal("the other server saw a panic")
	}
	var dropped []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "dhcp packet dropped") {
			dropped = append(dropped, line)
		}
	}
	if len(dropped) != 1 || !strings.Contains(dropped[0], `"vmi"="ns1/victim"`) || !strings.Contains(dropped[0], `"vmiUID"="uid-1"`) ||
		!strings.Contains(dropped[0], "assignment to entry in nil map") {
		t.Fatalf("logs of dropped packets: %q", dropped)
	}
}

// syncBuffer collects log lines written from the servers' goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
