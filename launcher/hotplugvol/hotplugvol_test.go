package hotplugvol

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func serve(t *testing.T, v Volume) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "volumes.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = Serve(l, v, logr.Discard()) }()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDiskImageIsCreatedAtItsSizeAndHandedOverOpen(t *testing.T) {
	dir := t.TempDir()
	c := serve(t, Volume{Path: dir})
	f, block, err := Open(c, Request{File: "disk.img", CreateBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if block {
		t.Error("a file in a Filesystem volume was reported as a block device")
	}
	if _, err := f.WriteAt([]byte("hello"), 4096); err != nil {
		t.Fatalf("descriptor is not writable: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "disk.img"))
	if err != nil || st.Size() != 8<<20 {
		t.Fatalf("disk.img: %v, size %d, want %d", err, st.Size(), 8<<20)
	}
	// The same connection serves the next request; an existing image keeps its size.
	g, _, err := Open(c, Request{File: "disk.img", CreateBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if st, _ := os.Stat(filepath.Join(dir, "disk.img")); st.Size() != 8<<20 {
		t.Errorf("an existing disk.img was resized to %d", st.Size())
	}
}

func TestNewFileMustNotExist(t *testing.T) {
	dir := t.TempDir()
	c := serve(t, Volume{Path: dir})
	f, _, err := Open(c, Request{File: "vm.memory.dump", NewFile: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := Open(c, Request{File: "vm.memory.dump", NewFile: true}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second create of the same dump file: %v, want an error saying it exists", err)
	}
}

func TestRequestsLeavingTheVolumeAreRefused(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.img")); err != nil {
		t.Fatal(err)
	}
	c := serve(t, Volume{Path: dir})
	for _, name := range []string{"../secret", "", "..", "link.img", "missing.img"} {
		if f, _, err := Open(c, Request{File: name}); err == nil {
			f.Close()
			t.Errorf("file %q was handed over", name)
		}
	}
}
