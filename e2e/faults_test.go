package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// TestNodeRuntimeCrashKeepsGuests: kill -9 of a node's kubelet and containerd while a VM runs, then
// both started again: the guest keeps running (its uptime grows, QEMU keeps its pid) and no pod
// of the node restarts.
func TestNodeRuntimeCrashKeepsGuests(t *testing.T) {
	c := localStack(t)
	node := e2eNodes[0]
	vmi, ws, qemu, upBefore := guestWithConsole(t, c, "steady", node)

	n := c.Nodes.Node(node)
	for _, comp := range []string{"kubelet", "containerd"} {
		if err := n.Kill(comp); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	if syscall.Kill(qemu[0], 0) != nil {
		t.Fatal("QEMU died with the kubelet and containerd")
	}
	for _, comp := range []string{"containerd", "kubelet"} {
		if err := n.Start(comp); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet is back once it renews its node's lease again.
	restarted := metav1.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		lease, err := c.Kube.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		return err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(restarted.Time), nil
	})
	if err != nil {
		t.Fatalf("the kubelet of %s did not renew its lease after the restart: %v", node, err)
	}
	pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s/%s is %s after the restart", p.Namespace, p.Name, p.Status.Phase)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s/%s: container %s restarted %d times", p.Namespace, p.Name, cs.Name, cs.RestartCount)
			}
		}
	}
	if got := qemuPIDs(t, c, vmi); len(got) != 1 || got[0] != qemu[0] {
		t.Fatalf("QEMU changed: %v -> %v", qemu, got)
	}
	// One console session per VMI: the first one goes before the second is opened.
	ws.Close()
	ws2 := stream(t, c, "virtualmachineinstances/steady/console")
	send(t, ws2, "\n")
	requireUptimeGrew(t, upBefore, uptime(t, ws2, "after"))
}

// TestLauncherPodDeletion: deleting a running VM's launcher pod stops its guest; the VMI goes
// Failed and the VM (runStrategy Always) starts a new VMI that runs.
func TestLauncherPodDeletion(t *testing.T) {
	c := localStack(t)
	startVM(t, c, vmManifest("phoenix", e2eNodes[1], "masquerade"))
	first := getVMI(t, c, "phoenix")
	pod := launcherPod(t, c, first)
	qemu := qemuPIDs(t, c, first)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sawFailed := false
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi := &v1.VirtualMachineInstance{}
		if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: "phoenix"}, vmi); err != nil {
			return false, nil
		}
		if vmi.UID == first.UID {
			sawFailed = sawFailed || vmi.Status.Phase == v1.Failed
			return false, nil
		}
		return vmi.Status.Phase == v1.Running, nil
	})
	if err != nil {
		t.Fatalf("no new VMI Running after the launcher pod was deleted: %v", err)
	}
	if !sawFailed {
		t.Error("the VMI of the deleted pod was never seen Failed")
	}
	if len(alive(qemu)) != 0 {
		t.Errorf("the old QEMU %v still runs", qemu)
	}
	second := getVMI(t, c, "phoenix")
	if second.UID == first.UID || second.UID == types.UID("") {
		t.Errorf("VMI uid %s, first was %s", second.UID, first.UID)
	}
	// The old VMI's directory (logs, sockets, cloud-init ISO) goes with its VMI and pod; the
	// new one's stays.
	oldDir := c.VMDir(first.Status.NodeName, pod.UID)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		if _, err := os.Lstat(oldDir); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the directory of the replaced VMI is still there: %s", oldDir)
			break
		}
	}
	if _, err := os.Stat(vmDir(c, second)); err != nil {
		t.Errorf("the running VMI's directory: %v", err)
	}
}

// TestStartStrategyPaused: a VMI with startStrategy Paused runs paused until it is unpaused, then
// its guest boots.
func TestStartStrategyPaused(t *testing.T) {
	c := localStack(t)
	m := strings.Replace(vmManifest("sleeper", e2eNodes[1], "masquerade"), "      terminationGracePeriodSeconds:", "      startStrategy: Paused\n      terminationGracePeriodSeconds:", 1)
	f := filepath.Join(t.TempDir(), "vm.yaml")
	if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.K8s.Kubectl("apply", "-f", f).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpVM(t, c, "sleeper")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitCondition(t, ctx, c, "sleeper", v1.VirtualMachineInstancePaused, corev1.ConditionTrue)
	vmi := getVMI(t, c, "sleeper")
	if vmi.Status.Phase != v1.Running {
		t.Errorf("paused VMI phase %s, want Running", vmi.Status.Phase)
	}
	time.Sleep(2 * time.Second)
	if strings.Contains(serialLog(c, vmi), "qvirt-guest: booted") {
		t.Fatal("the guest booted while paused")
	}
	putSub(t, c, "virtualmachineinstances/sleeper/unpause")
	waitCondition(t, ctx, c, "sleeper", v1.VirtualMachineInstancePaused, corev1.ConditionFalse)
	ws := stream(t, c, "virtualmachineinstances/sleeper/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
}
