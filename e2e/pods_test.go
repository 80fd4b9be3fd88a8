package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// podPids lists the processes of a pod, found in its cgroup on its node.
func podPids(c *localcluster.Cluster, pod *corev1.Pod) []int {
	n := c.Nodes.Node(pod.Spec.NodeName)
	if n == nil {
		return nil
	}
	return n.PodPids(string(pod.UID))
}

// podNetns is a pod's network namespace, through one of its processes.
func podNetns(t testing.TB, c *localcluster.Cluster, pod *corev1.Pod) string {
	t.Helper()
	pids := podPids(c, pod)
	if len(pids) == 0 {
		t.Fatalf("pod %s/%s has no process on %s", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	return fmt.Sprintf("/proc/%d/ns/net", pids[0])
}

// launcherPods lists a VMI's launcher pods.
func launcherPods(t testing.TB, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) *corev1.PodList {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(vmi.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher,kubevirt.io/created-by=" + string(vmi.UID)})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// qemuPIDs finds the QEMU processes in a VMI's launcher pod.
func qemuPIDs(t testing.TB, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) []int {
	t.Helper()
	pods := launcherPods(t, c, vmi)
	var out []int
	for i := range pods.Items {
		for _, pid := range podPids(c, &pods.Items[i]) {
			if strings.HasPrefix(procComm(pid), "qemu-system") {
				out = append(out, pid)
			}
		}
	}
	return out
}

// metricsEndpoint is a node agent's /metrics, served over TLS with the node's serving
// certificate, and a client that verifies it: the node CA, the node's name as server name.
type metricsEndpoint struct {
	Addr, Node string
	CA         []byte
	Client     *http.Client
}

// handlerMetrics is the /metrics endpoint of the virt-handler pod on node, reached over the pod network.
func handlerMetrics(t testing.TB, c *localcluster.Cluster, node string) metricsEndpoint {
	t.Helper()
	pod := handlerPod(t, c, node)
	ca := nodeCA(t, c)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the node CA holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: node}}
	return metricsEndpoint{Addr: pod.Status.PodIP + ":8443", Node: node, CA: ca, Client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// nodeCA is the CA that signs node agents' serving certificates.
func nodeCA(t testing.TB, c *localcluster.Cluster) []byte {
	t.Helper()
	s, err := c.Kube.CoreV1().ConfigMaps("kubevirt").Get(context.Background(), "kubevirt-node-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s.Data["ca-bundle"])
}

// handlerPod is the running virt-handler pod on node.
func handlerPod(t testing.TB, c *localcluster.Cluster, node string) *corev1.Pod {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(localcluster.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kubevirt.io=virt-handler", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			return p
		}
	}
	t.Fatalf("no running virt-handler pod on %s", node)
	return nil
}

// waitNewHandler waits for the DaemonSet to replace the virt-handler pod old on node.
func waitNewHandler(t testing.TB, c *localcluster.Cluster, node string, old types.UID) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := c.Kube.CoreV1().Pods(localcluster.Namespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: "kubevirt.io=virt-handler", FieldSelector: "spec.nodeName=" + node})
		if err == nil {
			for _, p := range pods.Items {
				if p.UID != old && p.Status.Phase == corev1.PodRunning && podReady(&p) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new virt-handler pod on %s", node)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// vmProcesses is every process a VM adds to its node: the launcher pod's (pause, virt-launcher,
// QEMU) and the containerd shim that runs them.
func vmProcesses(t testing.TB, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) []int {
	t.Helper()
	pods := launcherPods(t, c, vmi)
	var out []int
	for i := range pods.Items {
		pids := podPids(c, &pods.Items[i])
		out = append(out, pids...)
		in := map[int]bool{}
		for _, pid := range pids {
			in[pid] = true
		}
		// The containers' first processes are the shim's children; one shim serves the pod.
		for _, pid := range pids {
			if shim := parentPid(pid); shim > 0 && !in[shim] {
				out = append(out, shim)
				break
			}
		}
	}
	return out
}

// parentPid is the parent of pid (for a pod's sandbox process, its containerd shim).
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// alive is the subset of pids still running.
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			out = append(out, pid)
		}
	}
	return out
}

// guestWithConsole starts a VM on node and returns its VMI, an open console at the shell prompt,
// its one QEMU process and the guest's uptime.
func guestWithConsole(t *testing.T, c *localcluster.Cluster, name, node string) (*v1.VirtualMachineInstance, *websocket.Conn, []int, upReading) {
	t.Helper()
	return guestFromManifest(t, c, name, vmManifest(name, node, "masquerade"))
}

// guestFromManifest is guestWithConsole for the VM manifest given.
func guestFromManifest(t *testing.T, c *localcluster.Cluster, name, manifest string) (*v1.VirtualMachineInstance, *websocket.Conn, []int, upReading) {
	t.Helper()
	startVM(t, c, manifest)
	vmi := getVMI(t, c, name)
	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 60*time.Second)
	qemu := qemuPIDs(t, c, vmi)
	if len(qemu) != 1 {
		t.Fatalf("QEMU processes of %s: %v", name, qemu)
	}
	return vmi, ws, qemu, uptime(t, ws, "before")
}
