package testenv

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenTap creates a non-persistent tap device in the current network namespace and returns its
// descriptor; the device disappears when the descriptor is closed.
func OpenTap(t testing.TB, name string) *os.File {
	t.Helper()
	RequireRoot(t)
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/net/tun: %v", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		t.Fatalf("TUNSETIFF %s: %v", name, err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
	t.Cleanup(func() { f.Close() })
	return f
}
