package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestVMsOnNodes: VMs applied with kubectl land on a node through the real scheduler, boot,
// report their IP, serve HTTP over both bindings, and are reachable through virt-api.
func TestVMsOnNodes(t *testing.T) {
	c := localStack(t)
	node := e2eNodes[0]
	startVM(t, c, vmManifest("web-bridge", node, "bridge"))
	startVM(t, c, vmManifest("web-masq", node, "masquerade"))

	bridge, masq := getVMI(t, c, "web-bridge"), getVMI(t, c, "web-masq")
	for _, vmi := range []*v1.VirtualMachineInstance{bridge, masq} {
		if vmi.Status.NodeName != node || len(vmi.Status.Interfaces) != 1 || vmi.Status.Interfaces[0].IP == "" {
			t.Fatalf("%s: node %q interfaces %+v", vmi.Name, vmi.Status.NodeName, vmi.Status.Interfaces)
		}
	}
	bridgePod, masqPod := launcherPod(t, c, bridge), launcherPod(t, c, masq)
	if bridge.Status.Interfaces[0].IP != bridgePod.Status.PodIP {
		t.Errorf("bridge-bound guest reports %s, pod IP is %s", bridge.Status.Interfaces[0].IP, bridgePod.Status.PodIP)
	}

	t.Run("launcher pods get their devices from the device plugins", func(t *testing.T) {
		requireDevicesFromPlugins(t, bridgePod)
		requireDevicesFromPlugins(t, masqPod)
	})
	t.Run("QEMU runs as the qemu user without capabilities, in a baseline namespace", func(t *testing.T) {
		requireUnprivilegedLauncher(t, c, bridge, bridgePod)
		requireUnprivilegedLauncher(t, c, masq, masqPod)
		ns, err := c.Kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" {
			t.Errorf("namespace default enforces %q (%v), want baseline", ns.Labels["pod-security.kubernetes.io/enforce"], err)
		}
	})
	t.Run("bridge binding answers another pod", func(t *testing.T) {
		httpFromPod(t, c, masqPod, "http://"+bridge.Status.Interfaces[0].IP+"/", "qvirt-guest")
	})
	// The pod network as the node sees it (a bridge-bound pod's own namespace has given its
	// address to the guest, so it cannot be the client).
	nodeNetns := c.Nodes.Node(node).NetnsPath()
	t.Run("masquerade binding forwards the declared port", func(t *testing.T) {
		httpFromNetns(t, nodeNetns, "http://"+masqPod.Status.PodIP+":80/", "qvirt-guest")
	})
	t.Run("console through the kube-apiserver", func(t *testing.T) {
		ws := stream(t, c, "virtualmachineinstances/web-masq/console")
		send(t, ws, "\n")
		expect(t, ws, "qvirt# ", 60*time.Second)
		send(t, ws, "echo e2e-$((6*7))\n")
		expect(t, ws, "e2e-42", 30*time.Second)
	})
	t.Run("vnc answers RFB", func(t *testing.T) {
		ws := stream(t, c, "virtualmachineinstances/web-masq/vnc")
		expect(t, ws, "RFB 003.008", 30*time.Second)
	})
	t.Run("port-forward fetches the guest page", func(t *testing.T) {
		for _, path := range []string{"virtualmachineinstances/web-masq/portforward/80/tcp", "virtualmachines/web-bridge/portforward/80/tcp"} {
			ws := stream(t, c, path)
			send(t, ws, "GET / HTTP/1.0\r\n\r\n")
			expect(t, ws, "qvirt-guest", 30*time.Second)
		}
	})
	t.Run("LiveMigratable says why not, as KubeVirt does", func(t *testing.T) {
		if cond := condition(getVMI(t, c, "web-bridge"), v1.VirtualMachineInstanceIsMigratable); cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != "InterfaceNotLiveMigratable" {
			t.Errorf("web-bridge: LiveMigratable %+v, want False with reason InterfaceNotLiveMigratable", cond)
		}
		if cond := condition(getVMI(t, c, "web-masq"), v1.VirtualMachineInstanceIsMigratable); cond == nil || cond.Status != corev1.ConditionTrue {
			t.Errorf("web-masq: LiveMigratable %+v, want True", cond)
		}
	})
	t.Run("screenshot is a PNG", func(t *testing.T) {
		png, err := c.K8s.Kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/web-masq/vnc/screenshot").Output()
		if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
			t.Fatalf("screenshot: %v %q", err, png[:min(len(png), 16)])
		}
	})
	t.Run("metrics move", func(t *testing.T) {
		addr := handlerMetrics(t, c, node)
		// Only TLS: a plain HTTP request gets no metrics.
		if resp, err := http.Get("http://" + addr.Addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "kubevirt_vmi_") {
				t.Error("the node agent serves /metrics over plain HTTP")
			}
		}
		var first string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
			first = scrape(t, addr)
			if _, ok := sample(first, "kubevirt_vmi_network_transmit_bytes_total", "web-masq", ""); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no network series yet:\n%s", grepLines(first, "kubevirt_vmi_"))
			}
		}
		httpFromNetns(t, nodeNetns, "http://"+masqPod.Status.PodIP+":80/", "qvirt-guest")
		// The agent refreshes its statistics every --stats-interval (10 s in deploy/): wait for
		// every family to move, up to a few intervals.
		moving := []struct{ family, extra string }{
			{"kubevirt_vmi_cpu_usage_seconds_total", ""},
			{"kubevirt_vmi_vcpu_seconds_total", `state="running"`},
			{"kubevirt_vmi_network_transmit_bytes_total", ""},
			{"kubevirt_vmi_network_receive_bytes_total", ""},
		}
		var second string
		var stuck []string
		for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(time.Second) {
			second, stuck = scrape(t, addr), nil
			for _, f := range moving {
				a, ok1 := sample(first, f.family, "web-masq", f.extra)
				b, ok2 := sample(second, f.family, "web-masq", f.extra)
				if !ok1 || !ok2 || b <= a {
					stuck = append(stuck, fmt.Sprintf("%s: %v -> %v", f.family, a, b))
				}
			}
			if len(stuck) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, s := range stuck {
			t.Errorf("did not move: %s", s)
		}
		for _, family := range []string{"kubevirt_vmi_memory_resident_bytes", "kubevirt_vmi_memory_domain_bytes", "kubevirt_vmi_storage_read_traffic_bytes_total", "kubevirt_vmi_storage_iops_read_total"} {
			if v, ok := sample(second, family, "web-masq", ""); !ok || v <= 0 {
				t.Errorf("%s = %v, %v", family, v, ok)
			}
		}
		if !strings.Contains(second, `kubernetes_vmi_label_app="web-masq"`) || !strings.Contains(second, `node="`+node+`"`) {
			t.Error("series lack the node and VMI-label labels")
		}
	})
}

// TestNodeAgentRestartKeepsGuests: deleting the virt-handler pod leaves the guest running, and the
// DaemonSet's new pod adopts the VM: status updates resume.
func TestNodeAgentRestartKeepsGuests(t *testing.T) {
	c := localStack(t)
	node := e2eNodes[1]
	vmi, _, qemu, upBefore := guestWithConsole(t, c, "survivor", node)

	old := handlerPod(t, c, node)
	if err := c.Kube.CoreV1().Pods(old.Namespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNewHandler(t, c, node, old.UID)
	if syscall.Kill(qemu[0], 0) != nil {
		t.Fatal("QEMU died with the node agent")
	}
	if got := qemuPIDs(t, c, vmi); len(got) != 1 || got[0] != qemu[0] {
		t.Fatalf("QEMU restarted: %v -> %v", qemu, got)
	}
	// The new agent serves the console of the VM it adopted, and the guest ran all along. This
	// is read before the pause below, which stops the guest's clock.
	ws2 := stream(t, c, "virtualmachineinstances/survivor/console")
	send(t, ws2, "\n")
	requireUptimeGrew(t, upBefore, uptime(t, ws2, "after"))
	// Status updates resume: a pause through virt-api shows on the VMI.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	putSub(t, c, "virtualmachineinstances/survivor/pause")
	waitCondition(t, ctx, c, "survivor", v1.VirtualMachineInstancePaused, corev1.ConditionTrue)
	putSub(t, c, "virtualmachineinstances/survivor/unpause")
	waitCondition(t, ctx, c, "survivor", v1.VirtualMachineInstancePaused, corev1.ConditionFalse)
	if got := getVMI(t, c, "survivor"); got.UID != vmi.UID || got.Status.Phase != v1.Running {
		t.Errorf("VMI after the restart: uid %s phase %s", got.UID, got.Status.Phase)
	}
}

// upReading is the guest's uptime and the wall time it was read at.
type upReading struct {
	Guest float64
	At    time.Time
}

// requireUptimeGrew fails unless the guest's uptime grew by about the wall time between the
// readings: the guest neither rebooted nor stood still. A reading's wall time is the middle of
// its console round trip, so it is off by up to half of it; the slack allows for that and for
// a guest clock under emulation.
func requireUptimeGrew(t *testing.T, before, after upReading) {
	t.Helper()
	wall := after.At.Sub(before.At).Seconds()
	grew := after.Guest - before.Guest
	slack := 3 + wall/10
	if grew < wall-slack || grew > wall+slack {
		t.Errorf("the guest's uptime grew %.1f s (%.1f -> %.1f) in %.1f s of wall time", grew, before.Guest, after.Guest, wall)
		return
	}
	t.Logf("the guest's uptime grew %.1f s in %.1f s of wall time", grew, wall)
}

// uptime reads the guest's /proc/uptime through its console. The marker is computed by the
// guest's shell, so the echo of the typed command never matches it.
func uptime(t *testing.T, ws *websocket.Conn, tag string) upReading {
	t.Helper()
	sent := time.Now()
	send(t, ws, "echo "+tag+"$((6*7))=$(cut -d' ' -f1 /proc/uptime)=\n")
	marker := tag + "42="
	out := expect(t, ws, marker, 30*time.Second)
	for !strings.Contains(out[strings.Index(out, marker)+len(marker):], "=") {
		out += expect(t, ws, "=", 10*time.Second)
	}
	// The guest read its uptime between the command's send and its answer's arrival.
	at := sent.Add(time.Since(sent) / 2)
	rest := out[strings.Index(out, marker)+len(marker):]
	var v float64
	if _, err := fmt.Sscanf(rest[:strings.Index(rest, "=")], "%f", &v); err != nil {
		t.Fatalf("uptime %q: %v", rest, err)
	}
	return upReading{Guest: v, At: at}
}

func waitCondition(t *testing.T, ctx context.Context, c *localcluster.Cluster, name string, ct v1.VirtualMachineInstanceConditionType, want corev1.ConditionStatus) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi := &v1.VirtualMachineInstance{}
		if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
			return false, nil
		}
		if cond := condition(vmi, ct); cond != nil {
			return cond.Status == want, nil
		}
		return want == corev1.ConditionFalse, nil
	})
	if err != nil {
		t.Fatalf("%s condition %s never became %s", name, ct, want)
	}
}

// putSub calls a PUT subresource as the admin, through the aggregation layer.
// It retries while the node agent is (re)starting.
func putSub(t *testing.T, c *localcluster.Cluster, path string) {
	t.Helper()
	var out []byte
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		out, err = c.K8s.Kubectl("replace", "--raw", "/apis/subresources.kubevirt.io/v1/namespaces/default/"+path, "-f", "/dev/null").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "ServiceUnavailable") {
			break
		}
	}
	if err != nil {
		t.Fatalf("PUT %s: %v %s", path, err, out)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
