package e2e

// These tests run the built virtctl (bin/virtctl) against the local cluster, as a user would,
// with the example VM "tiny" from deploy/examples: a busybox guest with a root shell on its
// serial console and HTTP on port 80.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/testenv"
)

const vmName = "tiny"

var tinyMu sync.Mutex

// cluster returns the admin kubeconfig of the local cluster, with the example VM running, and
// the virtctl binary. The VM is applied again whenever it is not running: a test before may
// have removed every VM (uninstalling needs none left).
func cluster(t *testing.T) (kubeconfig, virtctl string, kvc client.Client) {
	t.Helper()
	c := localStack(t)
	root := testenv.RepoRoot(t)
	virtctl = filepath.Join(root, "bin", "virtctl")
	if _, err := os.Stat(virtctl); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("bin/virtctl missing: make test builds it")
		}
		t.Skipf("bin/virtctl not built (run `make build`)")
	}
	kvc = kv(t, c)
	tinyMu.Lock()
	defer tinyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var vmi v1.VirtualMachineInstance
	if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: vmName}, &vmi); err != nil || vmi.Status.Phase != v1.Running || vmi.DeletionTimestamp != nil {
		if _, err := c.ApplyAndWait(ctx, filepath.Join(root, "deploy", "examples", "vm-tiny.yaml"), 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return c.K8s.Kubeconfig(), virtctl, kvc
}

// virtctl runs one command to completion.
func virtctl(t *testing.T, kubeconfig, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("virtctl %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// background starts a long-running virtctl whose stdout is read line by line; it is
// interrupted (SIGINT) when the test ends.
func background(t *testing.T, kubeconfig, bin string, args ...string) (lines <-chan string, stop func() error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		b := make([]byte, 4096)
		var acc []byte
		for {
			n, err := out.Read(b)
			acc = append(acc, b[:n]...)
			for {
				i := bytes.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				ch <- string(acc[:i])
				acc = acc[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	var stopped bool
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return errors.New(err.Error() + ": " + stderr.String())
			}
			return nil
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("virtctl did not stop on SIGINT")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return ch, stop
}

func firstLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("virtctl exited without output")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no output from virtctl in 30s")
	}
	return ""
}

func TestLocalVersionShowsTheServer(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	stdout, stderr, code := virtctl(t, kubeconfig, bin, "version")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "Client Version: version.Info{GitVersion:\"v1.9.") ||
		!strings.Contains(stdout, "\nServer Version: version.Info{GitVersion:\"v1.9.") {
		t.Errorf("version output:\n%s", stdout)
	}
	t.Logf("%s", stdout)
}

// terminal collects what a pseudo-terminal shows.
type terminal struct {
	mu  sync.Mutex
	buf []byte
}

func (s *terminal) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *terminal) since(off int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf[min(off, len(s.buf)):])
}

func (s *terminal) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

// waitFor polls for text after offset off and returns the offset just past it.
func (s *terminal) waitFor(t *testing.T, off int, text string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if i := strings.Index(s.since(off), text); i >= 0 {
			return off + i + len(text)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not show on the console in %s; it shows %q", text, timeout, s.since(0))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLocalConsoleThroughAPseudoTerminal(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "console", vmName)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	var screen terminal
	go func() { _, _ = io.Copy(&screen, tty) }()

	off := screen.waitFor(t, 0, "Successfully connected to tiny console. The escape sequence is ^]", 30*time.Second)
	if _, err := tty.Write([]byte("\r")); err != nil {
		t.Fatal(err)
	}
	off = screen.waitFor(t, off, "qvirt# ", 30*time.Second)

	// Type the command a key at a time and time each key's echo from the guest's shell: the
	// round trip pty -> virtctl -> kube-apiserver -> virt-api -> node agent -> serial port and back.
	var rtts []time.Duration
	for _, c := range "echo $((6*7))" {
		start := time.Now()
		if _, err := tty.Write([]byte(string(c))); err != nil {
			t.Fatal(err)
		}
		off = screen.waitFor(t, off, string(c), 10*time.Second)
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	t.Logf("console keystroke-to-echo round trip over %d keys: min %v, median %v, max %v",
		len(rtts), rtts[0].Round(10*time.Microsecond), rtts[len(rtts)/2].Round(10*time.Microsecond), rtts[len(rtts)-1].Round(10*time.Microsecond))

	if _, err := tty.Write([]byte("\r")); err != nil {
		t.Fatal(err)
	}
	off = screen.waitFor(t, off, "\n42", 10*time.Second)
	screen.waitFor(t, off, "qvirt# ", 10*time.Second)

	if _, err := tty.Write([]byte{0x1d}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("Ctrl+] ended virtctl with %v; the terminal shows %q", err, screen.since(0))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("virtctl console did not leave on Ctrl+]")
	}
}

// TestLocalConsoleRefusesALinkedSocket: a launcher pod that puts a symbolic link where its serial
// socket was gets no console, even when the link leads to the real socket (which a plain dial
// would follow): the node agent refuses it, and virtctl says why.
func TestLocalConsoleRefusesALinkedSocket(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	c := localStack(t)
	vmi := getVMI(t, c, vmName)
	dir := vmDir(c, vmi)
	sock, moved := filepath.Join(dir, "serial0.sock"), filepath.Join(dir, "serial0.sock.moved")
	if err := os.Rename(sock, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(sock)
		if err := os.Rename(moved, sock); err != nil {
			t.Errorf("putting the serial socket back: %v", err)
		}
	})
	if err := os.Symlink("serial0.sock.moved", sock); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := virtctl(t, kubeconfig, bin, "console", "--timeout=1", vmName)
	if code == 0 {
		t.Fatalf("virtctl console connected through the link; stderr %q", stderr)
	}
	if !strings.Contains(stderr, "serial0.sock in directory ") || !strings.Contains(stderr, "is a symbolic link (to serial0.sock.moved); refusing to follow it") {
		t.Errorf("virtctl console failed without saying why: %q", stderr)
	}
}

func TestLocalVNCProxyOnly(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	lines, stop := background(t, kubeconfig, bin, "vnc", "--proxy-only", vmName)
	line := firstLine(t, lines)
	var out struct {
		Port int `json:"port"`
	}
	if err := json.Unmarshal([]byte(line), &out); err != nil || out.Port == 0 {
		t.Fatalf("first line %q is not {\"port\":N}: %v", line, err)
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(out.Port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	greeting := make([]byte, 12)
	if _, err := io.ReadFull(c, greeting); err != nil {
		t.Fatalf("reading the RFB greeting: %v", err)
	}
	if string(greeting) != "RFB 003.008\n" {
		t.Errorf("greeting %q", greeting)
	}
	c.Close()
	if err := stop(); err != nil {
		t.Errorf("stopping virtctl vnc: %v", err)
	}
}

func TestLocalPortForwardToTheGuestsWebServer(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	lines, stop := background(t, kubeconfig, bin, "port-forward", "vm/"+vmName, "18080:80")
	if line := firstLine(t, lines); line != "Forwarding from 127.0.0.1:18080 -> 80" {
		t.Fatalf("first line %q", line)
	}
	hc := &http.Client{Timeout: 15 * time.Second}
	for i := range 2 {
		resp, err := hc.Get("http://127.0.0.1:18080/")
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "qvirt-guest") {
			t.Errorf("GET %d: %s %q", i, resp.Status, body)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("stopping virtctl port-forward: %v", err)
	}
}

func TestLocalScreenshotIsAPNG(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	file := filepath.Join(t.TempDir(), "tiny.png")
	if _, stderr, code := virtctl(t, kubeconfig, bin, "screenshot", vmName, "--file", file); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	t.Logf("screenshot %dx%d", img.Bounds().Dx(), img.Bounds().Dy())
}

// waitPaused waits until the VMI's Paused condition is as wanted: the API server answers
// pause/unpause from that condition, which the node agent sets a moment after the request.
func waitPaused(t *testing.T, kv client.Client, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		vmi := &v1.VirtualMachineInstance{}
		err := kv.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: vmName}, vmi)
		if err == nil {
			c := condition(vmi, v1.VirtualMachineInstancePaused)
			if paused := c != nil && c.Status == corev1.ConditionTrue; paused == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("VMI never became paused=%v (%v)", want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestLocalPauseAndUnpause(t *testing.T) {
	kubeconfig, bin, kv := cluster(t)
	t.Cleanup(func() { virtctl(t, kubeconfig, bin, "unpause", "vm", vmName) })

	stdout, stderr, code := virtctl(t, kubeconfig, bin, "pause", "vm", vmName)
	if code != 0 || stdout != "VMI tiny was scheduled to pause\n" {
		t.Fatalf("pause: exit %d, %q %q", code, stdout, stderr)
	}
	waitPaused(t, kv, true)

	stdout, stderr, code = virtctl(t, kubeconfig, bin, "unpause", "vm", vmName)
	if code != 0 || stdout != "VMI tiny was scheduled to unpause\n" {
		t.Fatalf("unpause: exit %d, %q %q", code, stdout, stderr)
	}
	waitPaused(t, kv, false)

	_, stderr, code = virtctl(t, kubeconfig, bin, "unpause", "vm", vmName)
	if code == 0 || !strings.Contains(stderr, "Error unpausing VirtualMachineInstance tiny: VMI is not paused") {
		t.Errorf("second unpause: exit %d, stderr %q", code, stderr)
	}
}

// TestLocalMigrateOfAVMThatCannotMoveIsRefused: virtctl migrate of a VM whose LiveMigratable
// condition is False (bridge binding on the pod network) is refused by the webhook with that
// condition's reason, and leaves no migration behind to hold a target pod.
func TestLocalMigrateOfAVMThatCannotMoveIsRefused(t *testing.T) {
	kubeconfig, bin, kv := cluster(t)
	c := localStack(t)
	const name = "unmovable"
	startVM(t, c, vmManifest(name, "", "bridge"))
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=false").Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionFalse)
	_, stderr, code := virtctl(t, kubeconfig, bin, "migrate", name)
	if code == 0 || !strings.Contains(stderr, "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable") {
		t.Errorf("migrate: exit %d, stderr %q", code, stderr)
	}
	var list v1.VirtualMachineInstanceMigrationList
	if err := kv.List(context.Background(), &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Items {
		if m.Spec.VMIName == name {
			t.Errorf("a refused migration was stored: %s (phase %s)", m.Name, m.Status.Phase)
		}
	}
}

// TestLocalLifecycleFollowsVirtctl runs last in this file: it stops the example VM.
func TestLocalLifecycleFollowsVirtctl(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	c := localStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	status := func(want string) {
		t.Helper()
		if err := c.WaitVMStatus(ctx, "default", vmName, want, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		if _, stderr, code := virtctl(t, kubeconfig, bin, args...); code != 0 {
			t.Fatalf("virtctl %v: exit %d: %s", args, code, stderr)
		}
	}
	before := getVMI(t, c, vmName)
	// A soft reboot restarts the guest in the same VMI and QEMU: it boots a second time.
	boots := func() int { return strings.Count(serialLog(c, before), "qvirt-guest: booted") }
	first := boots()
	run("soft-reboot", vmName)
	for deadline := time.Now().Add(2 * time.Minute); boots() <= first; time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the guest did not boot again after soft-reboot")
		}
	}
	if got := getVMI(t, c, vmName); got.UID != before.UID || got.Status.Phase != v1.Running {
		t.Fatalf("soft reboot replaced or stopped the VMI: %s %s", got.UID, got.Status.Phase)
	}
	run("pause", "vm", vmName)
	status("Paused")
	run("unpause", "vm", vmName)
	status("Running")

	run("restart", vmName)
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi := &v1.VirtualMachineInstance{}
		if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: vmName}, vmi); err != nil {
			return false, nil
		}
		return vmi.UID != before.UID && vmi.Status.Phase == v1.Running, nil
	})
	if err != nil {
		t.Fatalf("restart did not bring up a new VMI: %v", err)
	}
	status("Running")
	after := getVMI(t, c, vmName)
	afterProcs := vmProcesses(t, c, after)

	run("stop", vmName)
	status("Stopped")
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi := &v1.VirtualMachineInstance{}
		gone := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: vmName}, vmi) != nil
		var pods corev1.PodList
		_ = kv(t, c).List(ctx, &pods, client.MatchingLabels{"kubevirt.io/created-by": string(after.UID)})
		return gone && len(pods.Items) == 0 && len(alive(afterProcs)) == 0, nil
	})
	if err != nil {
		t.Fatalf("after stop something is left: processes %v of %v", alive(afterProcs), afterProcs)
	}

	// start --paused: the new VMI runs paused (its guest does not boot) until it is unpaused.
	run("start", "--paused", vmName)
	status("Paused")
	run("unpause", "vm", vmName)
	status("Running")
}
