package netplumb

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/vm"
)

// bootGuest starts the tiny test guest under emulation with one NIC on tap, and returns its
// console. QEMU runs in the test's own namespace: only the tap descriptor reaches the pod's.
func bootGuest(t *testing.T, g testenv.Guest, mac net.HardwareAddr, tap *os.File) *testenv.Console {
	t.Helper()
	spec := &launcherapi.VMSpec{
		Namespace:   "test",
		Name:        strings.ToLower(t.Name()),
		MachineType: "q35",
		Accel:       launcherapi.Accel_ACCEL_TCG,
		Cpu:         &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1},
		MemoryBytes: 256 << 20,
		Acpi:        true,
		Firmware: &launcherapi.Firmware{KernelBoot: &launcherapi.KernelBoot{
			KernelPath: g.Kernel, InitrdPath: g.Initrd, Cmdline: "console=ttyS0 quiet"}},
		Devices:    &launcherapi.Devices{SerialConsole: true},
		Interfaces: []*launcherapi.Interface{{Name: "default", MacAddress: mac.String(), TapFdName: "tap0"}},
	}
	v := vm.New(vm.Config{Dir: filepath.Join(t.TempDir(), "vm"), Taps: map[string]*os.File{"tap0": tap}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := v.Start(ctx, spec); err != nil {
		t.Fatalf("start VM: %v", err)
	}
	t.Cleanup(func() { _ = v.Kill(context.Background()) })
	return testenv.DialConsole(t, v.Layout().SerialSocket())
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// httpClientIn is an HTTP client whose connections start in the namespace at ns.
func httpClientIn(ns string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var conn net.Conn
				err := Do(ns, func() error {
					var err error
					conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return conn, err
			},
		},
	}
}

// fetch GETs url from the namespace at ns until it answers 200 or the context ends.
func fetch(ctx context.Context, ns, url string) (string, error) {
	c := httpClientIn(ns)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(b), nil
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, rerr)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("GET %s from %s: %w (last: %v)", url, ns, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serveWhoAmI serves, inside the namespace at ns, a page telling each client the address it
// came from, so a test sees what the network sees of the guest.
func serveWhoAmI(t *testing.T, ns, addr string) {
	t.Helper()
	var ln net.Listener
	if err := Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "seen-from=%s\n", host)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// guestFetch has the guest GET / from host:port and waits for want in the answer. It uses nc:
// the static busybox's wget looks up the "http" service through glibc's NSS and crashes.
func guestFetch(t *testing.T, con *testenv.Console, hostPort, want string) {
	t.Helper()
	ctx := within(t, 90*time.Second)
	host, port, _ := strings.Cut(hostPort, ":")
	for {
		if err := con.Type(fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 %s %s\n", host, port)); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := con.WaitFor(wctx, want)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the guest never got %q from %s: %v", want, hostPort, err)
		}
	}
}

func TestBridgeBindingWithGuest(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	pod, client := podNetwork(t)
	ctx := context.Background()
	podMAC := podLink(t, pod, "eth0").Attrs().HardwareAddr

	b := NewBridgeBinding(pod, BridgeConfig{})
	res, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Teardown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	tap, err := OpenTap(ctx, pod, TapConfig{Name: res.Tap})
	if err != nil {
		t.Fatal(err)
	}
	con := bootGuest(t, g, res.MAC, tap)
	tap.Close() // QEMU has its own copy

	if err := con.WaitFor(within(t, 2*time.Minute), "qvirt-guest: ip=10.244.0.5"); err != nil {
		t.Fatal(err)
	}
	body, err := fetch(within(t, time.Minute), client, "http://10.244.0.5/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "qvirt-guest ") {
		t.Fatalf("http://10.244.0.5/ answered %q, not the guest's page", body)
	}
	// The client reached the pod's IP at the pod's MAC: the guest answers as the pod did.
	withNL(t, client, func(h *netlink.Handle) error {
		neighs, err := h.NeighList(0, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if n.IP.Equal(net.ParseIP("10.244.0.5")) && n.HardwareAddr.String() != podMAC.String() {
				t.Errorf("the client sees 10.244.0.5 at %s, not the pod's MAC %s", n.HardwareAddr, podMAC)
			}
			if n.IP.Equal(net.ParseIP("10.244.0.5")) {
				return nil
			}
		}
		return fmt.Errorf("no neighbour entry for 10.244.0.5")
	})
	// The network sees the guest as the pod itself.
	serveWhoAmI(t, client, "10.244.0.1:8080")
	guestFetch(t, con, "10.244.0.1:8080", "seen-from=10.244.0.5")
}

func TestMasqueradeBindingWithGuest(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	pod, client := podNetwork(t)
	ctx := context.Background()

	b := NewMasqueradeBinding(pod, MasqueradeConfig{Ports: []Port{{TCP, 80}}})
	res, err := b.Setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Teardown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	tap, err := OpenTap(ctx, pod, TapConfig{Name: res.Tap})
	if err != nil {
		t.Fatal(err)
	}
	con := bootGuest(t, g, res.MAC, tap)
	tap.Close()

	if err := con.WaitFor(within(t, 2*time.Minute), "qvirt-guest: ip=10.0.2.2"); err != nil {
		t.Fatal(err)
	}
	body, err := fetch(within(t, time.Minute), client, "http://10.244.0.5:80/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "qvirt-guest ") {
		t.Fatalf("http://10.244.0.5:80/ answered %q, not the guest's page", body)
	}
	// Outbound, the guest is masqueraded as the pod's IP.
	serveWhoAmI(t, client, "10.244.0.1:8080")
	guestFetch(t, con, "10.244.0.1:8080", "seen-from=10.244.0.5")

	// With port 80 no longer declared nothing forwards it; with no ports at all everything
	// is forwarded, as in KubeVirt.
	only22 := NewMasqueradeBinding(pod, MasqueradeConfig{Ports: []Port{{TCP, 22}}})
	if _, err := only22.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	only22.Close()
	if _, err := httpClientIn(client).Get("http://10.244.0.5:80/"); err == nil {
		t.Fatal("port 80 reached the guest without being declared")
	}
	all := NewMasqueradeBinding(pod, MasqueradeConfig{})
	if _, err := all.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	all.Close()
	if _, err := fetch(within(t, 30*time.Second), client, "http://10.244.0.5:80/"); err != nil {
		t.Fatalf("with no ports declared: %v", err)
	}
}
