package safepath

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen serves a unix socket at p and returns the first bytes any client sends.
func listen(t *testing.T, p string) <-chan string {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan string, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 64)
				n, _ := c.Read(b)
				got <- string(b[:n])
			}()
		}
	}()
	return got
}

func received(t *testing.T, got <-chan string, want string) {
	t.Helper()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("socket received %q, want %q", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("socket never received %q", want)
	}
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
}

// layout is a VM directory root/vm beside a directory outside/ holding a socket of another
// service, which the VM directory's owner would like the node agent to write into.
type layout struct {
	root, vm, outside string
	decoy             <-chan string
}

func newLayout(t *testing.T) layout {
	t.Helper()
	base := t.TempDir()
	l := layout{root: filepath.Join(base, "vms"), outside: filepath.Join(base, "host")}
	l.vm = filepath.Join(l.root, "vm")
	for _, d := range []string{l.vm, l.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.decoy = listen(t, filepath.Join(l.outside, "host.sock"))
	return l
}

// plainDialReaches proves the attack works when the name is followed, as net.Dial does: the
// bytes meant for the VM's socket arrive at the other service's.
func (l layout) plainDialReaches(t *testing.T, p string) {
	t.Helper()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatalf("plain dial of %s: %v", p, err)
	}
	send(t, c, "plain")
	received(t, l.decoy, "plain")
}

func dial(l layout, rel string) (*net.UnixConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return DialUnix(ctx, l.root, "vm", rel, os.Geteuid())
}

func TestDialReachesTheSocket(t *testing.T) {
	l := newLayout(t)
	got := listen(t, filepath.Join(l.vm, "serial0.sock"))
	c, err := dial(l, "serial0.sock")
	if err != nil {
		t.Fatal(err)
	}
	send(t, c, "hello")
	received(t, got, "hello")
	select {
	case s := <-l.decoy:
		t.Fatalf("the other socket received %q", s)
	default:
	}
}

func TestDialRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, l layout) (plain string) // plain: the path net.Dial would follow to the other socket
		rel   string
		is    error
		want  string
	}{{
		name: "symlink to another socket",
		setup: func(t *testing.T, l layout) string {
			must(t, os.Symlink(filepath.Join(l.outside, "host.sock"), filepath.Join(l.vm, "serial0.sock")))
			return filepath.Join(l.vm, "serial0.sock")
		},
		rel: "serial0.sock", is: ErrSymlink,
		want: "serial0.sock in directory " + "VM" + " is a symbolic link (to " + "OUT/host.sock); refusing to follow it",
	}, {
		name: "relative symlink to another socket",
		setup: func(t *testing.T, l layout) string {
			must(t, os.Symlink("../../host/host.sock", filepath.Join(l.vm, "vnc.sock")))
			return filepath.Join(l.vm, "vnc.sock")
		},
		rel: "vnc.sock", is: ErrSymlink, want: "vnc.sock in directory VM is a symbolic link (to ../../host/host.sock)",
	}, {
		name: "symlink in a parent path",
		setup: func(t *testing.T, l layout) string {
			must(t, os.Symlink(l.outside, filepath.Join(l.vm, "sub")))
			return filepath.Join(l.vm, "sub", "host.sock")
		},
		rel: "sub/host.sock", is: ErrSymlink, want: "sub/host.sock in directory VM: sub is a symbolic link (to OUT); refusing to follow it",
	}, {
		name:  "dot-dot escape",
		setup: func(t *testing.T, l layout) string { return filepath.Join(l.vm, "../../host/host.sock") },
		rel:   "../../host/host.sock", is: ErrEscape, want: "../../host/host.sock leads out of directory VM; refused",
	}, {
		name:  "absolute path",
		setup: func(t *testing.T, l layout) string { return filepath.Join(l.outside, "host.sock") },
		rel:   "OUT/host.sock", is: ErrEscape, want: "leads out of directory VM",
	}, {
		name: "regular file",
		setup: func(t *testing.T, l layout) string {
			must(t, os.WriteFile(filepath.Join(l.vm, "serial0.sock"), []byte("x"), 0o644))
			return ""
		},
		rel: "serial0.sock", is: ErrNotSock, want: "serial0.sock in directory VM is a regular file, not a socket",
	}, {
		name: "directory",
		setup: func(t *testing.T, l layout) string {
			must(t, os.Mkdir(filepath.Join(l.vm, "serial0.sock"), 0o755))
			return ""
		},
		rel: "serial0.sock", is: ErrNotSock, want: "is a directory, not a socket",
	}, {
		name:  "missing",
		setup: func(t *testing.T, l layout) string { return "" },
		rel:   "serial0.sock", is: fs.ErrNotExist, want: "serial0.sock in directory VM",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(t)
			if plain := tc.setup(t, l); plain != "" {
				l.plainDialReaches(t, plain)
			}
			rel := strings.ReplaceAll(tc.rel, "OUT", l.outside)
			c, err := dial(l, rel)
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			want := strings.NewReplacer("VM", l.vm, "OUT", l.outside).Replace(tc.want)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			select {
			case s := <-l.decoy:
				t.Fatalf("the other socket received %q", s)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

func TestDialRefusesALinkedDirectory(t *testing.T) {
	l := newLayout(t)
	must(t, os.Remove(l.vm))
	must(t, os.Symlink(l.outside, l.vm))
	l.plainDialReaches(t, filepath.Join(l.vm, "host.sock"))
	_, err := dial(l, "host.sock")
	if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), "vm in directory "+l.root+" is a symbolic link") {
		t.Fatalf("error %v, want the directory refused as a link", err)
	}
}

func TestDialRefusesAnotherOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root; -short skips it")
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a socket to another uid needs root")
	}
	l := newLayout(t)
	p := filepath.Join(l.vm, "serial0.sock")
	listen(t, p)
	must(t, os.Lchown(p, 4242, 4242))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialUnix(ctx, l.root, "vm", "serial0.sock", 0)
	if !errors.Is(err, ErrOwner) || !strings.Contains(err.Error(), "is owned by uid 4242, expected 0") {
		t.Fatalf("error %v, want the owner refused", err)
	}
	c, err := DialUnix(ctx, l.root, "vm", "serial0.sock", 4242)
	if err != nil {
		t.Fatalf("with the right owner expected: %v", err)
	}
	c.Close()
}

func TestRemoveAllKeepsWhatLinksPointTo(t *testing.T) {
	l := newLayout(t)
	keep := filepath.Join(l.outside, "keep")
	must(t, os.WriteFile(keep, []byte("x"), 0o644))
	must(t, os.MkdirAll(filepath.Join(l.vm, "disks"), 0o755))
	must(t, os.WriteFile(filepath.Join(l.vm, "disks", "seed.iso"), []byte("x"), 0o644))
	must(t, os.Symlink(l.outside, filepath.Join(l.vm, "dirlink")))
	must(t, os.Symlink(keep, filepath.Join(l.vm, "disks", "filelink")))
	listen(t, filepath.Join(l.vm, "serial0.sock"))
	if err := RemoveAll(l.root, "vm"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(l.vm); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the directory is still there: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("a file a link pointed to was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.outside, "host.sock")); err != nil {
		t.Fatalf("a socket a link's directory held was removed: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../host"} {
		if err := RemoveAll(l.root, bad); !errors.Is(err, ErrEscape) {
			t.Errorf("RemoveAll(%q): %v, want refused", bad, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
