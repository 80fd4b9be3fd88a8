package safepath

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestListenUnixReplacesWhatIsThereAndFollowsNoLink: a link left at the socket's name is
// removed, not followed; the socket is made in the directory, reachable by its name however
// long the directory's path, and owned by the uid asked for.
func TestListenUnixReplacesWhatIsThereAndFollowsNoLink(t *testing.T) {
	root := t.TempDir()
	long := strings.Repeat("d", 100)
	if err := os.MkdirAll(filepath.Join(root, long), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(root, long, "m.sock")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(root, long)
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.ListenUnix("m.sock", os.Geteuid())
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Fatalf("the link's target changed: %q %v", b, err)
	}
	fi, err := os.Lstat(filepath.Join(root, long, "m.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
		t.Fatalf("socket: %v %v", fi, err)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	d2, err := OpenDir(root, long)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	c, err := d2.DialUnix(t.Context(), "m.sock", os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "hi" {
		t.Fatalf("read %q %v", b, err)
	}
	c.Close()
	for _, bad := range []string{"", "../x", "a/b", ".."} {
		if _, err := d2.ListenUnix(bad, 0); err == nil {
			t.Errorf("ListenUnix(%q) accepted", bad)
		}
	}
}
