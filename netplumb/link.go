package netplumb

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds retries of a dump the kernel marked inconsistent (NLM_F_DUMP_INTR);
// that happens when links or addresses change while the dump runs, and a retry sees a
// settled table.
const dumpAttempts = 10

func retryable(err error) bool {
	return errors.Is(err, netlink.ErrDumpInterrupted) || errors.Is(err, unix.EINTR)
}

// retryDump runs a netlink dump until it completes without interruption.
func retryDump[T any](what string, dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpAttempts {
		if v, err = dump(); err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return v, fmt.Errorf("list %s: %w", what, err)
	}
	return v, nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// lookupLink returns the link named name, or nil when there is none.
func (c *nsConn) lookupLink(name string) (netlink.Link, error) {
	l, err := c.nl.LinkByName(name)
	if isLinkNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up link %s: %w", name, err)
	}
	return l, nil
}

// mustLink returns the link named name, or an error wrapping ErrLinkNotFound.
func (c *nsConn) mustLink(name string) (netlink.Link, error) {
	l, err := c.lookupLink(name)
	if err == nil && l == nil {
		err = fmt.Errorf("%w: %s", ErrLinkNotFound, name)
	}
	return l, err
}

func (c *nsConn) addrs(l netlink.Link) ([]netlink.Addr, error) {
	return retryDump("addresses of "+l.Attrs().Name, func() ([]netlink.Addr, error) {
		return c.nl.AddrList(l, unix.AF_INET)
	})
}

func (c *nsConn) routes(l netlink.Link) ([]netlink.Route, error) {
	return retryDump("routes of "+l.Attrs().Name, func() ([]netlink.Route, error) {
		return c.nl.RouteList(l, unix.AF_INET)
	})
}

// ensureAddr adds addr to l unless it is there already; it reports whether it added it.
func (c *nsConn) ensureAddr(l netlink.Link, addr *netlink.Addr) (bool, error) {
	have, err := c.addrs(l)
	if err != nil {
		return false, err
	}
	for _, a := range have {
		if a.IPNet.String() == addr.IPNet.String() {
			return false, nil
		}
	}
	if err := c.nl.AddrAdd(l, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("add %s to %s: %w", addr.IPNet, l.Attrs().Name, err)
	}
	return true, nil
}

// delLink deletes the link named name if it exists.
func (c *nsConn) delLink(name string) error {
	l, err := c.lookupLink(name)
	if err != nil || l == nil {
		return err
	}
	if err := c.nl.LinkDel(l); err != nil && !isLinkNotFound(err) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// setMaster enslaves l to master unless it already is; the undo frees it again.
func (c *nsConn) setMaster(r *Reverter, l, master netlink.Link) error {
	if l.Attrs().MasterIndex == master.Attrs().Index {
		return nil
	}
	prev := l.Attrs().MasterIndex
	if err := c.nl.LinkSetMasterByIndex(l, master.Attrs().Index); err != nil {
		return fmt.Errorf("attach %s to %s: %w", l.Attrs().Name, master.Attrs().Name, err)
	}
	r.Add("attach "+l.Attrs().Name, func() error {
		if prev != 0 {
			return c.nl.LinkSetMasterByIndex(l, prev)
		}
		return c.nl.LinkSetNoMaster(l)
	})
	return nil
}

// setUp brings l up unless it is up; the undo brings it down again.
func (c *nsConn) setUp(r *Reverter, l netlink.Link) error {
	if l.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := c.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
	}
	r.Add("up "+l.Attrs().Name, func() error { return c.nl.LinkSetDown(l) })
	return nil
}

// setMTU sets l's MTU unless it already has it (or mtu is 0); the undo restores it.
func (c *nsConn) setMTU(r *Reverter, l netlink.Link, mtu int) error {
	prev := l.Attrs().MTU
	if mtu == 0 || prev == mtu {
		return nil
	}
	if err := c.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set MTU of %s to %d: %w", l.Attrs().Name, mtu, err)
	}
	r.Add("mtu "+l.Attrs().Name, func() error { return c.nl.LinkSetMTU(l, prev) })
	return nil
}

// ensureBridge creates the bridge unless it exists, tolerating a concurrent creation, and
// checks that whatever has the name is a bridge.
func (c *nsConn) ensureBridge(r *Reverter, name string, mtu int, mac net.HardwareAddr, alias string) (*netlink.Bridge, error) {
	l, err := c.lookupLink(name)
	if err != nil {
		return nil, err
	}
	if l == nil {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		attrs.MTU = mtu
		attrs.HardwareAddr = mac
		attrs.Alias = alias
		err := c.nl.LinkAdd(&netlink.Bridge{LinkAttrs: attrs})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create bridge %s: %w", name, err)
		}
		if err == nil {
			r.Add("create bridge "+name, func() error { return c.delLink(name) })
		}
		if l, err = c.mustLink(name); err != nil {
			return nil, err
		}
	}
	br, ok := l.(*netlink.Bridge)
	if !ok {
		return nil, fmt.Errorf("%w: %s is a %s, not a bridge", ErrLinkConflict, name, l.Type())
	}
	// The kernel ignores IFLA_IFALIAS when it creates a link, and an existing bridge keeps the
	// alias of the run that made it: set it only where it is missing.
	if alias != "" && br.Attrs().Alias == "" {
		if err := c.nl.LinkSetAlias(br, alias); err != nil {
			return nil, fmt.Errorf("set alias of %s: %w", name, err)
		}
		br.Attrs().Alias = alias
	}
	return br, nil
}
