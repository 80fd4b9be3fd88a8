package nodes_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/localcluster/nodes"
	"github.com/qvirt/qvirt/internal/localcluster/ociimages"
	"github.com/qvirt/qvirt/internal/localcluster/registry"
)

// env is a control plane, a registry and nodes on a bridge of their own.
type env struct {
	k8s   *controlplane.Cluster
	kube  kubernetes.Interface
	nodes *nodes.Cluster
	reg   string
}

func start(t *testing.T, nw nodes.Network, names ...string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("runs kubelets and containerd; -short skips it")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: nodes run in network and mount namespaces of their own")
	}
	root := testenv.RepoRoot(t)
	need := []string{"_tools/k8s/kube-apiserver", "_tools/k8s/kubelet", "_tools/node/containerd", "_tools/node/registry", "bin/qvirt-pause"}
	for _, f := range need {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Skipf("%s missing (make k8s nodes build): %v", f, err)
		}
	}
	dir := t.TempDir()
	log := testr.New(t)
	toolsDir := filepath.Join(root, "_tools/node")
	if err := nodes.Sweep(filepath.Join(dir, "nodes"), toolsDir, nw); err != nil {
		t.Fatal(err)
	}
	if err := nw.CreateBridge(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k8s, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "k8s"), BinDir: filepath.Join(root, "_tools/k8s"),
		BindAddress: nw.HostAddr().String(), Log: log})
	if err != nil {
		_ = nodes.Sweep(filepath.Join(dir, "nodes"), toolsDir, nw)
		t.Fatal(err)
	}
	e := &env{k8s: k8s}
	regAddr := net.JoinHostPort(nw.HostAddr().String(), "5000")
	reg, err := registry.Start(ctx, registry.Options{Binary: filepath.Join(toolsDir, "registry"), Addr: regAddr,
		Dir: filepath.Join(dir, "registry"), LogPath: filepath.Join(dir, "registry.log"), Log: log})
	if err != nil {
		k8s.Stop()
		_ = nodes.Sweep(filepath.Join(dir, "nodes"), toolsDir, nw)
		t.Fatal(err)
	}
	e.reg = regAddr
	pause, err := ociimages.Pause(filepath.Join(root, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimages.Push(ctx, pause, regAddr, "qvirt/pause:test", nil); err != nil {
		t.Fatal(err)
	}
	e.kube = kubernetes.NewForConfigOrDie(k8s.RESTConfig())
	nc, err := nodes.Start(ctx, nodes.Options{
		Dir: filepath.Join(dir, "nodes"), Names: names, Network: nw,
		K8sBinDir: filepath.Join(root, "_tools/k8s"), ToolsDir: toolsDir,
		PauseImage:  "localhost:5000/qvirt/pause:test",
		Mirrors:     map[string]string{"localhost:5000": "http://" + regAddr},
		Credentials: k8s, Admin: e.kube, Log: log,
	})
	t.Cleanup(func() {
		if nc != nil {
			if err := nc.Stop(); err != nil {
				t.Errorf("stopping nodes: %v", err)
			}
		}
		reg.Stop()
		k8s.Stop()
		if err := nodes.Sweep(filepath.Join(dir, "nodes"), toolsDir, nw); err != nil {
			t.Errorf("sweep: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e.nodes = nc
	return e
}

func TestTwoNodes(t *testing.T) {
	nw := nodes.Network{Index: 9}
	before := sysctls(t)
	e := start(t, nw, "tn-a", "tn-b")
	ctx := context.Background()

	for _, name := range []string{"tn-a", "tn-b"} {
		n, err := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		info := n.Status.NodeInfo
		t.Logf("node %s: kubelet %s, runtime %s, addresses %v", name, info.KubeletVersion, info.ContainerRuntimeVersion, n.Status.Addresses)
		if info.KubeletVersion != "v1.37.2" || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
			t.Errorf("node %s: kubelet %q runtime %q, want v1.37.2 and containerd://2.x", name, info.KubeletVersion, info.ContainerRuntimeVersion)
		}
	}
	// Pods on both nodes: one serves, the other fetches from it across the nodes.
	bb, err := ociimages.Files(ociimages.File{Path: "/bin/busybox", Source: "/bin/busybox", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimages.Push(ctx, bb, e.reg, "test/busybox:1", nil); err != nil {
		t.Fatal(err)
	}
	pod := func(name, node string, cmd ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "localhost:5000/test/busybox:1", Command: append([]string{"/bin/busybox"}, cmd...)}}},
		}
	}
	// The service-account controller creates default/default shortly after the control plane starts.
	for i := 0; ; i++ {
		if _, err := e.kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if i > 300 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	server, err := e.kube.CoreV1().Pods("default").Create(ctx,
		pod("server", "tn-a", "sh", "-c", "mkdir /www && echo pong-from-a > /www/index.html && echo serving && exec /bin/busybox httpd -f -p 8080 -h /www"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server = waitPhase(t, e.kube, server.Name, corev1.PodRunning)
	t.Logf("server pod IP %s on %s", server.Status.PodIP, server.Spec.NodeName)
	client, err := e.kube.CoreV1().Pods("default").Create(ctx,
		pod("client", "tn-b", "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | /bin/busybox nc `+server.Status.PodIP+" 8080"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, e.kube, client.Name, corev1.PodSucceeded)

	// kubectl logs and exec go from kube-apiserver to the kubelet, authorized by RBAC.
	out := kubectl(t, e, "logs", "client")
	if !strings.Contains(out, "pong-from-a") {
		t.Errorf("client log %q: no answer from the other node's pod", out)
	}
	if out := kubectl(t, e, "exec", "server", "--", "/bin/busybox", "cat", "/www/index.html"); !strings.Contains(out, "pong-from-a") {
		t.Errorf("exec output %q", out)
	}
	// Node identity: a kubelet may change its own Node only.
	nodeCfg, _, err := e.k8s.UserConfig("system:node:tn-a", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	asNode := kubernetes.NewForConfigOrDie(nodeCfg)
	patch := []byte(`{"metadata":{"labels":{"qvirt-test":"x"}}}`)
	if _, err := asNode.CoreV1().Nodes().Patch(ctx, "tn-b", "application/merge-patch+json", patch, metav1.PatchOptions{}); err == nil {
		t.Error("node tn-a could label node tn-b")
	} else {
		t.Logf("tn-a labelling tn-b: %v", err)
	}
	if _, err := asNode.CoreV1().Nodes().Patch(ctx, "tn-a", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("node tn-a labelling itself: %v", err)
	}

	if err := e.nodes.Stop(); err != nil {
		t.Fatal(err)
	}
	e.nodes = nil
	if after := sysctls(t); after != before {
		t.Errorf("kernel settings after stop:\n%s\nwant\n%s", after, before)
	}
	if _, err := net.InterfaceByName(nw.Bridge()); err == nil {
		t.Errorf("bridge %s left behind", nw.Bridge())
	}
	if m, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/qvirt%d-*", nw.Index)); len(m) > 0 {
		t.Errorf("cgroups left behind: %v", m)
	}
}

func sysctls(t *testing.T) string {
	var b strings.Builder
	for _, k := range []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "vm/unprivileged_userfaultfd"} {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s", k, v)
	}
	return b.String()
}

func waitPhase(t *testing.T, kube kubernetes.Interface, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := kube.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == phase {
			return p
		}
		if err == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) && p.Status.Phase != phase {
			t.Fatalf("pod %s ended %s: %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not %s: %+v", name, phase, p.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func kubectl(t *testing.T, e *env, args ...string) string {
	t.Helper()
	cmd := e.k8s.Kubectl(args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
