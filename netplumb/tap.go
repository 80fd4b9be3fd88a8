package netplumb

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tapFlags: one queue, no packet-info header, virtio-net header on (QEMU's virtio-net offloads
// need it).
const tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// Owner is the user and group allowed to attach to a tap without CAP_NET_ADMIN.
type Owner struct {
	UID, GID uint32
}

// TapConfig describes a tap device.
type TapConfig struct {
	Name string
	// MTU of the tap; 0 leaves the current one (1500 on a new tap).
	MTU int
	// Owner, when set, lets an unprivileged QEMU attach to the tap.
	Owner *Owner
}

// OpenTap creates the tap cfg.Name inside the network namespace at nsPath (persistent,
// single-queue, vnet_hdr on), or reuses the tap of that name, applies owner and MTU, sets it
// up, and returns a descriptor for QEMU. The tap outlives the descriptor; DeleteLink removes
// it. A tap already held by another descriptor gives ErrTapBusy.
func OpenTap(ctx context.Context, nsPath string, cfg TapConfig) (*os.File, error) {
	c, err := openNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := NewReverter(logr.FromContextOrDiscard(ctx))
	f, err := c.ensureTap(r, cfg, true)
	if err != nil {
		return nil, errors.Join(err, r.Revert())
	}
	return f, nil
}

// DeleteLink removes the link name (a tap, a bridge) from the namespace at nsPath; a link
// that does not exist is not an error.
func DeleteLink(nsPath, name string) error {
	c, err := openNS(nsPath)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.delLink(name)
}

// ensureTap makes sure the tap exists with our flags, owner, MTU, and is up. With keep it
// returns the attached descriptor; without it, a tap that QEMU already holds is fine.
func (c *nsConn) ensureTap(r *Reverter, cfg TapConfig, keep bool) (*os.File, error) {
	if cfg.Name == "" || len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap name %q: must be 1 to %d bytes", cfg.Name, unix.IFNAMSIZ-1)
	}
	existing, err := c.lookupLink(cfg.Name)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if err := checkTap(existing); err != nil {
			return nil, err
		}
	}
	var f *os.File
	err = c.Do(func() error {
		var err error
		f, err = attachTap(cfg)
		return err
	})
	switch {
	case errors.Is(err, ErrTapBusy) && existing != nil && !keep:
		// QEMU holds it: the device is there and was configured when it was made.
	case err != nil:
		return nil, err
	}
	if existing == nil {
		r.Add("create tap "+cfg.Name, func() error { return c.delLink(cfg.Name) })
	}
	if f != nil && !keep {
		f.Close()
		f = nil
	}
	if f != nil {
		r.Add("open tap "+cfg.Name, f.Close)
	}
	l, err := c.mustLink(cfg.Name)
	if err != nil {
		return nil, err
	}
	if err := c.setMTU(r, l, cfg.MTU); err != nil {
		return nil, err
	}
	if err := c.setUp(r, l); err != nil {
		return nil, err
	}
	return f, nil
}

// checkTap refuses a link that TUNSETIFF with our flags would not attach to, with a clearer
// error than the kernel's EINVAL.
func checkTap(l netlink.Link) error {
	t, ok := l.(*netlink.Tuntap)
	if !ok {
		return fmt.Errorf("%w: %s is a %s, not a tap", ErrLinkConflict, l.Attrs().Name, l.Type())
	}
	if t.Mode != netlink.TUNTAP_MODE_TAP {
		return fmt.Errorf("%w: %s is a tun device, not a tap", ErrLinkConflict, t.Name)
	}
	if t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 {
		return fmt.Errorf("%w: %s is multi-queue", ErrLinkConflict, t.Name)
	}
	return nil
}

// attachTap opens /dev/net/tun and creates or attaches to the tap. It must run inside the
// namespace: the kernel puts a new tap in the namespace of the thread that opened the file.
func attachTap(cfg TapConfig) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+cfg.Name)
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	ifr, err := unix.NewIfreq(cfg.Name)
	if err != nil {
		return nil, err
	}
	ifr.SetUint16(tapFlags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: %s: %w", ErrTapBusy, cfg.Name, err)
		}
		return nil, fmt.Errorf("TUNSETIFF %s: %w", cfg.Name, err)
	}
	if cfg.Owner != nil {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, int(cfg.Owner.UID)); err != nil {
			return nil, fmt.Errorf("TUNSETOWNER %s: %w", cfg.Name, err)
		}
		if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, int(cfg.Owner.GID)); err != nil {
			return nil, fmt.Errorf("TUNSETGROUP %s: %w", cfg.Name, err)
		}
	}
	// Persistent, so the bridge port survives QEMU closing the descriptor and a later run can
	// reattach by name.
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return nil, fmt.Errorf("TUNSETPERSIST %s: %w", cfg.Name, err)
	}
	ok = true
	return f, nil
}
