package netplumb

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// natRules is the masquerade binding's NAT: the guest reaches out as the pod, and traffic for
// the pod's IP (on the given ports, or all of it) goes to the guest.
type natRules struct {
	table    string
	podIface string
	podIP    netip.Addr
	guestIP  netip.Addr
	ports    []Port
}

func (c *nsConn) nft() (*nftables.Conn, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(c.ns)))
	if err != nil {
		return nil, fmt.Errorf("nftables in %s: %w", c.path, err)
	}
	return conn, nil
}

// apply replaces the whole table in one transaction, so a run over an earlier one leaves
// exactly the same rules and a failure leaves the old ones.
func (n natRules) apply(conn *nftables.Conn) error {
	t := &nftables.Table{Name: n.table, Family: nftables.TableFamilyIPv4}
	conn.AddTable(t)
	conn.DelTable(t)
	conn.AddTable(t)
	pre := conn.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := conn.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})

	inbound := append(matchIfname(expr.MetaKeyIIFNAME, n.podIface), matchAddr(16, n.podIP)...)
	dnat := []expr.Any{
		&expr.Immediate{Register: 1, Data: n.guestIP.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
	if len(n.ports) == 0 {
		conn.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: concat(inbound, dnat)})
	}
	for _, p := range n.ports {
		proto := byte(unix.IPPROTO_TCP)
		if p.Protocol == UDP {
			proto = unix.IPPROTO_UDP
		}
		conn.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: concat(inbound, matchPort(proto, p.Port), dnat)})
	}
	conn.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(
		matchIfname(expr.MetaKeyOIFNAME, n.podIface), matchAddr(12, n.guestIP), []expr.Any{&expr.Masq{}})})
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: %w", n.table, err)
	}
	return nil
}

func tableExists(conn *nftables.Conn, name string) (bool, error) {
	_, err := conn.ListTableOfFamily(name, nftables.TableFamilyIPv4)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up nftables table %s: %w", name, err)
	}
	return true, nil
}

// deleteTable removes the table if it exists.
func deleteTable(conn *nftables.Conn, name string) error {
	if ok, err := tableExists(conn, name); err != nil || !ok {
		return err
	}
	conn.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyIPv4})
	if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nftables table %s: %w", name, err)
	}
	return nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func matchIfname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// matchAddr compares the IPv4 header's source (offset 12) or destination (16) with a.
func matchAddr(offset uint32, a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

func matchPort(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}
