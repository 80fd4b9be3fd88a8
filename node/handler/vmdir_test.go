package handler

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/server"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/safepath"
)

// serve listens on a unix socket at p and returns what each client sends first.
func serve(t *testing.T, p string) <-chan string {
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
			b := make([]byte, 64)
			n, _ := c.Read(b)
			c.Close()
			got <- string(b[:n])
		}
	}()
	return got
}

func arrives(t *testing.T, got <-chan string, want string) {
	t.Helper()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("received %q, want %q", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q never arrived", want)
	}
}

// runningVM is a node agent with one running VM whose directory is returned, beside a
// directory of the node's holding another service's socket (host.sock).
func runningVM(t *testing.T) (h *Handler, vmDir, hostDir string) {
	t.Helper()
	base := shortTempDir(t)
	root, hostDir := filepath.Join(base, "pods"), filepath.Join(base, "host")
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm1", UID: "uid-1"}}
	c := testClient(t, testLauncherPod(vmi)).Build()
	h = New(c, Options{NodeName: "node01", KubeletPodsDir: root, LauncherUID: os.Geteuid()})
	st := h.state(vmi, true)
	st.lc = &launcherConn{dir: st.dir}
	st.last = &launcherapi.StatusResponse{State: launcherapi.State_STATE_RUNNING}
	for _, d := range []string{dirPath(t, st), hostDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h, dirPath(t, st), hostDir
}

func TestConsoleReachesTheSerialSocket(t *testing.T) {
	h, dir, _ := runningVM(t)
	got := serve(t, filepath.Join(dir, "serial0.sock"))
	s, err := h.Backend().Console(context.Background(), nodeapi.VMI{Namespace: "default", Name: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := io.WriteString(s, "typed"); err != nil {
		t.Fatal(err)
	}
	arrives(t, got, "typed")
}

func TestVMDirSocketsRefuseLinks(t *testing.T) {
	for _, tc := range []struct {
		sock string
		open func(h *Handler) error
	}{
		{"serial0.sock", func(h *Handler) error {
			_, err := h.Backend().Console(context.Background(), nodeapi.VMI{Namespace: "default", Name: "vm1"})
			return err
		}},
		{"vnc.sock", func(h *Handler) error {
			_, err := h.Backend().VNC(context.Background(), nodeapi.VMI{Namespace: "default", Name: "vm1"}, false)
			return err
		}},
		{server.SocketName, func(h *Handler) error {
			_, err := dialLauncher(h.dirOf("default", "uid-1"))
			return err
		}},
		{server.FDSocketName, func(h *Handler) error {
			return (&launcherConn{dir: h.dirOf("default", "uid-1")}).sendTaps(map[string]*os.File{"tap-default": os.Stdin})
		}},
	} {
		t.Run(tc.sock, func(t *testing.T) {
			h, dir, hostDir := runningVM(t)
			host := filepath.Join(hostDir, "host.sock")
			decoy := serve(t, host)
			link := filepath.Join(dir, tc.sock)
			if err := os.Symlink(host, link); err != nil {
				t.Fatal(err)
			}
			// Dialled by name, as a plain net.Dial does, the link reaches the node's socket.
			c, err := net.Dial("unix", link)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "leak")
			c.Close()
			arrives(t, decoy, "leak")

			err = tc.open(h)
			if !errors.Is(err, safepath.ErrSymlink) {
				t.Fatalf("error %v, want the link refused", err)
			}
			if want := tc.sock + " in directory " + dir + " is a symbolic link (to " + host + "); refusing to follow it"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			select {
			case s := <-decoy:
				t.Fatalf("the node's socket received %q", s)
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

func TestConsoleRefusalReachesTheClient(t *testing.T) {
	h, dir, _ := runningVM(t)
	if err := os.WriteFile(filepath.Join(dir, "serial0.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := h.Backend().Console(context.Background(), nodeapi.VMI{Namespace: "default", Name: "vm1"})
	if !errors.Is(err, nodeapi.ErrUnavailable) || !errors.Is(err, safepath.ErrNotSock) {
		t.Fatalf("error %v, want unavailable because not a socket", err)
	}
	if !strings.Contains(err.Error(), "serial0.sock in directory "+dir+" is a regular file, not a socket") {
		t.Errorf("error %q does not say why", err)
	}
}
