package podrunner

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/node/images"
)

// harness is one node with its runner, in a namespace of its own, on the shared control plane.
type harness struct {
	t        *testing.T
	cluster  *controlplane.Cluster
	admin    kubernetes.Interface
	node     string
	subnet   string
	ns       string
	stateDir string
	vmRoot   string
	store    *images.Store
	launcher string

	cancel context.CancelFunc
	done   chan error
}

// newHarness makes node n of this test process: names carry the pid, so that runs of this
// package in parallel (or other packages' nodes) never share a node or its network namespace.
func newHarness(t *testing.T, n int) *harness {
	node := fmt.Sprintf("prtest-%d-%d", os.Getpid(), n)
	subnetIndex := n
	c := testCluster(t)
	admin, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	store, err := images.Open(filepath.Join(tmp, "images"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, cluster: c, admin: admin, node: node, ns: node,
		subnet:   fmt.Sprintf("10.244.%d.0/24", subnetIndex),
		stateDir: filepath.Join(tmp, "state"), vmRoot: filepath.Join(tmp, "vms"),
		store: store, launcher: exe,
	}
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods need the default service account, which the controller manager creates a little later.
	if _, err := admin.CoreV1().ServiceAccounts(h.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)
	return h
}

// startRunner runs a Runner as the node itself (system:node:NAME), with a kubelet's rights.
func (h *harness) startRunner() {
	h.t.Helper()
	cfg, _, err := h.cluster.UserConfig("system:node:"+h.node, "system:nodes")
	if err != nil {
		h.t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := New(Options{
		NodeName: h.node, Client: client, LauncherBinary: h.launcher, Images: h.store,
		CNI: CNIOptions{Subnet: h.subnet}, StateDir: h.stateDir, Log: testr.NewWithOptions(h.t, testr.Options{Verbosity: 1}),
		PodRetry: 500 * time.Millisecond,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- r.Run(ctx) }()
}

// waitSchedulable waits for the node lifecycle controller to lift the not-ready taint it puts on
// every new node, so pod start times below do not include it.
func (h *harness) waitSchedulable() {
	h.t.Helper()
	began := time.Now()
	waitFor(h.t, 60*time.Second, "the node to be schedulable", func() bool {
		n, err := h.admin.CoreV1().Nodes().Get(context.Background(), h.node, metav1.GetOptions{})
		if err != nil || len(n.Spec.Taints) > 0 {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	h.t.Logf("node %s schedulable %v after the runner started", h.node, time.Since(began).Round(time.Millisecond))
}

func (h *harness) stopRunner() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Error("Run did not return within 30s of cancel")
	}
	h.cancel = nil
}

// cleanup stops the runner and removes anything a failed test may have left: processes of the
// node's pods, their namespaces, the node's network and the Node.
func (h *harness) cleanup() {
	h.stopRunner()
	ctx := context.Background()
	sbs, _ := os.ReadDir(filepath.Join(h.stateDir, "pods"))
	for _, e := range sbs {
		r := &Runner{opts: Options{StateDir: h.stateDir}}
		if sb, err := r.loadState(e.Name()); err == nil {
			killSession(sb.Shim.Pid)
			deleteNetns(sb.Netns)
		}
	}
	if err := RemoveNodeNetwork(h.node); err != nil {
		h.t.Error(err)
	}
	h.admin.CoreV1().Namespaces().Delete(ctx, h.ns, metav1.DeleteOptions{})
	h.admin.CoreV1().Nodes().Delete(ctx, h.node, metav1.DeleteOptions{})
}

// launcherPod is shaped like virt-controller's launcher pods, running the fake launcher, one
// extra container per VM image.
func (h *harness) launcherPod(name string, env map[string]string, vmImages ...string) *corev1.Pod {
	compute := corev1.Container{
		Name: ComputeContainer, Image: "qvirt/virt-launcher:latest",
		Command:      []string{"/usr/bin/virt-launcher", "--dir", "/var/run/qvirt/vm", "--vmi", h.ns + "/" + name, "--stop-grace-period", "5s"},
		Env:          []corev1.EnvVar{{Name: fakeLauncherEnv, Value: "1"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "vm-dir", MountPath: "/var/run/qvirt/vm"}},
		Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
	}
	for k, v := range env {
		compute.Env = append(compute.Env, corev1.EnvVar{Name: k, Value: v})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: map[string]string{LauncherLabel: LauncherLabelValue}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{compute},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			AutomountServiceAccountToken:  ptr.To(false),
			NodeSelector:                  map[string]string{corev1.LabelHostname: h.node, SchedulableLabel: "true"},
			Volumes: []corev1.Volume{{Name: "vm-dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(h.vmRoot, name), Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}}}},
		},
	}
	for i, img := range vmImages {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("volume%d", i), Image: img, Command: []string{"/usr/bin/container-disk"},
		})
	}
	return pod
}

func (h *harness) create(pod *corev1.Pod) *corev1.Pod {
	h.t.Helper()
	p, err := h.admin.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// waitPod polls the pod until ok holds and returns it.
func (h *harness) waitPod(name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	for {
		p, err := h.admin.CoreV1().Pods(h.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pod %s: timed out after %v waiting for %s; last: %v; status: %+v", name, timeout, what, err, statusOf(last))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" }

// waitGone waits for the pod to be deleted from the API.
func (h *harness) waitGone(name string, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := h.admin.CoreV1().Pods(h.ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pod %s still exists after %v (%v)", name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := h.admin.CoreV1().Pods(h.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// launcherPid reads the pid the fake launcher wrote into its hostPath directory.
func (h *harness) launcherPid(name string) int {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.vmRoot, name, "fake.pid"))
	if err != nil {
		h.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	return pid
}

// assertNoTrace checks that nothing of the pod is left: process, network namespace, veth.
func (h *harness) assertNoTrace(p *corev1.Pod, pids ...int) {
	h.t.Helper()
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && st.state != 'Z' {
			h.t.Errorf("pid %d of pod %s still runs", pid, p.Name)
		}
	}
	if netnsExists(podNetns(p.UID)) {
		h.t.Errorf("netns of pod %s left behind", p.Name)
	}
	if _, err := os.Stat(filepath.Join(h.stateDir, "pods", string(p.UID))); err == nil {
		h.t.Errorf("state of pod %s left behind", p.Name)
	}
}

// veths lists the veth interfaces in the node's network namespace (the host ends of pods).
func (h *harness) veths() []string {
	h.t.Helper()
	out, err := exec.Command("ip", "-netns", NodeNetns(h.node), "-o", "link", "show", "type", "veth").CombinedOutput()
	if err != nil {
		h.t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	return names
}

// dialFrom connects to addr from inside the network namespace of pod and returns the first line.
func dialFrom(pod *corev1.Pod, addr string) (string, error) {
	var line string
	err := inNetns(netnsPath(podNetns(pod.UID)), func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

func TestNodeRegistersAndPodsRun(t *testing.T) {
	h := newHarness(t, 1)
	h.startRunner()
	ctx := context.Background()

	// The node: Ready, labelled, with the machine's capacity, and a lease kept fresh.
	var node *corev1.Node
	waitFor(t, 30*time.Second, "a Ready node", func() bool {
		n, err := h.admin.CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				node = n
				return true
			}
		}
		return false
	})
	for k, v := range map[string]string{corev1.LabelHostname: h.node, corev1.LabelOSStable: "linux", SchedulableLabel: "true"} {
		if node.Labels[k] != v {
			t.Errorf("node label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if cpu := node.Status.Allocatable.Cpu(); cpu.IsZero() || node.Status.Allocatable.Memory().IsZero() || node.Status.Allocatable.Pods().Value() != maxPods {
		t.Errorf("allocatable %v", node.Status.Allocatable)
	}
	waitFor(t, 10*time.Second, "the node lease", func() bool {
		lease, err := h.admin.CoordinationV1().Leases(leaseNamespace).Get(ctx, h.node, metav1.GetOptions{})
		return err == nil && lease.Spec.RenewTime != nil && *lease.Spec.HolderIdentity == h.node &&
			len(lease.OwnerReferences) == 1 && lease.OwnerReferences[0].UID == node.UID
	})

	h.waitSchedulable()

	// Two launcher pods, placed by the real scheduler.
	created := time.Now()
	a := h.create(h.launcherPod("a", nil))
	b := h.create(h.launcherPod("b", nil))
	a = h.waitPod("a", 60*time.Second, "Running", running)
	t.Logf("pod a: created to Running in %v", time.Since(created).Round(time.Millisecond))
	b = h.waitPod("b", 60*time.Second, "Running", running)
	t.Logf("pods a and b: created to both Running in %v", time.Since(created).Round(time.Millisecond))
	if a.Spec.NodeName != h.node {
		t.Errorf("pod a bound to %q", a.Spec.NodeName)
	}
	_, subnet, _ := net.ParseCIDR(h.subnet)
	for _, p := range []*corev1.Pod{a, b} {
		if !subnet.Contains(net.ParseIP(p.Status.PodIP)) || p.Status.HostIP != "127.0.0.1" {
			t.Errorf("pod %s: podIP %s hostIP %s", p.Name, p.Status.PodIP, p.Status.HostIP)
		}
		for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			if c := condition(p.Status, ct); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("pod %s condition %s: %+v", p.Name, ct, c)
			}
		}
		if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready {
			t.Errorf("pod %s container statuses %+v", p.Name, cs)
		}
	}
	if a.Status.PodIP == b.Status.PodIP {
		t.Fatalf("both pods got %s", a.Status.PodIP)
	}

	// Each pod reaches the other's launcher; the launcher runs in its pod's namespace.
	for _, c := range []struct{ from, to *corev1.Pod }{{b, a}, {a, b}} {
		line, err := dialFrom(c.from, net.JoinHostPort(c.to.Status.PodIP, "8080"))
		if want := "hello " + h.ns + "/" + c.to.Name; err != nil || line != want {
			t.Errorf("from %s to %s: %q, %v; want %q", c.from.Name, c.to.Name, line, err, want)
		}
	}
	pidA := h.launcherPid("a")
	want, _ := netnsInode(netnsPath(podNetns(a.UID)))
	if got, _ := netnsInode(fmt.Sprintf("/proc/%d/ns/net", pidA)); got != want {
		t.Errorf("launcher of a in netns %d, want %d", got, want)
	}
	if log, _ := os.ReadFile(filepath.Join(h.vmRoot, "a", "launcher.log")); !strings.Contains(string(log), "fake launcher starting for "+h.ns+"/a") {
		t.Errorf("launcher.log: %q", log)
	}
	if v := h.veths(); len(v) != 2 {
		t.Errorf("veths in the node namespace: %v, want 2", v)
	}

	// The status settles: no endless rewrites.
	rv := h.waitPod("a", 5*time.Second, "", func(*corev1.Pod) bool { return true }).ResourceVersion
	time.Sleep(2 * time.Second)
	if again := h.waitPod("a", 5*time.Second, "", func(*corev1.Pod) bool { return true }).ResourceVersion; again != rv {
		t.Errorf("pod a rewritten while nothing changed (resourceVersion %s -> %s)", rv, again)
	}

	// Deleting a: SIGTERM, then gone, with nothing left; b untouched.
	deleted := time.Now()
	h.delete("a")
	h.waitGone("a", 30*time.Second)
	t.Logf("pod a: delete to gone in %v", time.Since(deleted).Round(time.Millisecond))
	h.assertNoTrace(a, pidA)
	if v := h.veths(); len(v) != 1 {
		t.Errorf("veths after deleting a: %v, want 1", v)
	}
	if log, _ := os.ReadFile(filepath.Join(h.vmRoot, "a", "launcher.log")); !strings.Contains(string(log), "SIGTERM") {
		t.Errorf("launcher of a was not stopped with SIGTERM: %q", log)
	}
	if line, err := dialFrom(b, net.JoinHostPort(b.Status.PodIP, "8080")); err != nil || line == "" {
		t.Errorf("pod b after deleting a: %q, %v", line, err)
	}

	// The address of a is free again: a new pod may get it.
	c := h.create(h.launcherPod("c", nil))
	c = h.waitPod("c", 60*time.Second, "Running", running)
	h.delete("b")
	h.delete("c")
	h.waitGone("b", 30*time.Second)
	h.waitGone("c", 30*time.Second)
	h.assertNoTrace(b)
	h.assertNoTrace(c)
	if v := h.veths(); len(v) != 0 {
		t.Errorf("veths left: %v", v)
	}
}

func TestImagePull(t *testing.T) {
	h := newHarness(t, 2)
	h.startRunner()
	h.waitSchedulable()
	h.create(h.launcherPod("vm", nil, "localhost/qvirt/tiny-disk"))

	p := h.waitPod("vm", 60*time.Second, "ErrImagePull", func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil && cs.State.Waiting.Reason == ReasonErrImagePull {
				return true
			}
		}
		return false
	})
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending", p.Status.Phase)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "volume0" && !strings.Contains(cs.State.Waiting.Message, "localhost/qvirt/tiny-disk") {
			t.Errorf("message %q does not name the image", cs.State.Waiting.Message)
		}
	}
	if _, err := os.Stat(filepath.Join(h.vmRoot, "vm", "fake.pid")); err == nil {
		t.Error("the launcher started without its image")
	}
	waitFor(t, 30*time.Second, "an ErrImagePull event", func() bool {
		evs, _ := h.admin.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "vm" && strings.Contains(e.Message, ReasonErrImagePull) {
				return true
			}
		}
		return false
	})

	// Once the image is there, the retry starts the pod.
	disk := filepath.Join(t.TempDir(), "disk.qcow2")
	os.WriteFile(disk, []byte("qcow2"), 0o644)
	if err := h.store.Add("localhost/qvirt/tiny-disk:latest", map[string]string{"/disk/disk.qcow2": disk}); err != nil {
		t.Fatal(err)
	}
	p = h.waitPod("vm", 60*time.Second, "Running", running)
	digest, _ := h.store.Digest("localhost/qvirt/tiny-disk")
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			t.Errorf("container %s: %+v", cs.Name, cs.State)
		}
		if cs.Name == "volume0" && !strings.HasSuffix(cs.ImageID, "@"+digest) {
			t.Errorf("image ID %q, want ...@%s", cs.ImageID, digest)
		}
	}
	h.delete("vm")
	h.waitGone("vm", 30*time.Second)
	h.assertNoTrace(p)
}

func TestLauncherExitAndGrace(t *testing.T) {
	h := newHarness(t, 3)
	h.startRunner()
	h.waitSchedulable()
	h.create(h.launcherPod("crash", map[string]string{"FAKE_CHILD": "1"}))
	h.create(h.launcherPod("ok", nil))
	h.create(h.launcherPod("stubborn", map[string]string{"FAKE_IGNORE_TERM": "1"}))
	crash := h.waitPod("crash", 60*time.Second, "Running", running)
	okPod := h.waitPod("ok", 60*time.Second, "Running", running)
	stubborn := h.waitPod("stubborn", 60*time.Second, "Running", running)

	// A crash (exit 2, its "QEMU" left behind) fails the pod and kills the leftover; the other
	// pods run on.
	b, err := os.ReadFile(filepath.Join(h.vmRoot, "crash", "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(string(b))
	crashPid := h.launcherPid("crash")
	os.WriteFile(filepath.Join(h.vmRoot, "crash", "exit"), []byte("2"), 0o644)
	crash = h.waitPod("crash", 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	term := crash.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 2 || term.Reason != ReasonError || !strings.Contains(term.Message, "crashing with 2") {
		t.Errorf("crashed compute: %+v", crash.Status.ContainerStatuses[0])
	}
	if c := condition(crash.Status, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("Ready of the crashed pod: %+v", c)
	}
	for _, pid := range []int{crashPid, child} {
		if st, err := readStat(pid); err == nil && st.state != 'Z' {
			t.Errorf("pid %d of the crashed pod still runs", pid)
		}
	}
	if netnsExists(podNetns(crash.UID)) {
		t.Error("the crashed pod's netns is still there")
	}
	if line, err := dialFrom(okPod, net.JoinHostPort(stubborn.Status.PodIP, "8080")); err != nil || line == "" {
		t.Errorf("other pods after the crash: %q, %v", line, err)
	}

	// Exit 0: Succeeded.
	os.WriteFile(filepath.Join(h.vmRoot, "ok", "exit"), []byte("0"), 0o644)
	okPod = h.waitPod("ok", 30*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if term := okPod.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != ReasonCompleted {
		t.Errorf("exit 0: %+v", okPod.Status.ContainerStatuses[0])
	}

	// A launcher ignoring SIGTERM is killed when the grace period is over.
	stubbornPid := h.launcherPid("stubborn")
	began := time.Now()
	if err := h.admin.CoreV1().Pods(h.ns).Delete(context.Background(), "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)}); err != nil {
		t.Fatal(err)
	}
	h.waitGone("stubborn", 30*time.Second)
	if took := time.Since(began); took < 2*time.Second {
		t.Errorf("deleted after %v, before the 2s grace period", took)
	}
	h.assertNoTrace(stubborn, stubbornPid)

	// Finished pods are deleted at once.
	h.delete("crash")
	h.delete("ok")
	h.waitGone("crash", 30*time.Second)
	h.waitGone("ok", 30*time.Second)
	h.assertNoTrace(crash)
	h.assertNoTrace(okPod)
}

func TestRunnerRestartAdopts(t *testing.T) {
	h := newHarness(t, 4)
	h.startRunner()
	h.waitSchedulable()
	h.create(h.launcherPod("keep", nil))
	h.create(h.launcherPod("dies", nil))
	keep := h.waitPod("keep", 60*time.Second, "Running", running)
	h.waitPod("dies", 60*time.Second, "Running", running)
	keepPid, diesPid := h.launcherPid("keep"), h.launcherPid("dies")

	h.stopRunner()
	// The launchers outlive the runner; one of them ends while no runner watches.
	if st, err := readStat(keepPid); err != nil || st.state == 'Z' {
		t.Fatalf("launcher of keep died with the runner: %v", err)
	}
	os.WriteFile(filepath.Join(h.vmRoot, "dies", "exit"), []byte("3"), 0o644)
	waitFor(t, 10*time.Second, "the launcher of dies to exit", func() bool {
		st, err := readStat(diesPid)
		return err != nil || st.state == 'Z'
	})

	h.startRunner()
	dies := h.waitPod("dies", 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if term := dies.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 {
		t.Errorf("launcher that ended while the runner was down: %+v", dies.Status.ContainerStatuses[0])
	}
	keep = h.waitPod("keep", 10*time.Second, "Running", running)
	if pid := h.launcherPid("keep"); pid != keepPid {
		t.Errorf("keep restarted: pid %d, was %d", pid, keepPid)
	}
	if line, err := dialFrom(keep, net.JoinHostPort(keep.Status.PodIP, "8080")); err != nil || line == "" {
		t.Errorf("keep after the restart: %q, %v", line, err)
	}

	// The new runner watches the adopted launcher: deletion stops it.
	h.delete("keep")
	h.waitGone("keep", 30*time.Second)
	h.assertNoTrace(keep, keepPid)
	h.delete("dies")
	h.waitGone("dies", 30*time.Second)
	h.assertNoTrace(dies)
}
