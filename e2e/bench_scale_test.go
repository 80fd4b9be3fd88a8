package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/testenv"
)

// BenchmarkControllerScale creates 500 Halted VMs, switches them all to Always, and reports how
// long the real virt-controller (its binary, as deployed) takes until every VMI has its launcher
// pod bound by the real scheduler, and the controller's resident memory with 500 VMs. Nodes are
// Node objects only: the pods are never run, the controller's work is what is measured.
func BenchmarkControllerScale(b *testing.B) {
	s := controlPlane(b)
	root := testenv.RepoRoot(b)
	bin := filepath.Join(root, "bin", "virt-controller")
	if _, err := os.Stat(bin); err != nil {
		b.Skipf("bin/virt-controller not built: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kube, _ := kubernetes.NewForConfig(s.Cluster.RESTConfig())
	for i := 0; i < 4; i++ {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%d", i), Labels: map[string]string{"kubevirt.io/schedulable": "true", "kubernetes.io/hostname": fmt.Sprintf("scale-%d", i)}},
			Status: corev1.NodeStatus{
				Capacity:    scaleNodeResources(),
				Allocatable: scaleNodeResources(),
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
			}}
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(b.TempDir(), "virt-controller.log"))
	cmd := exec.Command(bin, "--kubeconfig", s.Cluster.Kubeconfig(), "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()

	c := kvClient(b, s)
	const n = 500
	for i := 0; i < n; i++ {
		vm := benchVM(fmt.Sprintf("vm-%03d", i), v1.RunStrategyHalted)
		vm.Namespace = "scale"
		if err := c.Create(ctx, vm); err != nil {
			b.Fatal(err)
		}
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"runStrategy":"Always"}}`))
		vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: fmt.Sprintf("vm-%03d", i)}}
		if err := c.Patch(ctx, vm, patch); err != nil {
			b.Fatal(err)
		}
	}
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == n, nil
	})
	if err != nil {
		b.Fatalf("not every VMI got a bound launcher pod: %v", err)
	}
	b.ReportMetric(time.Since(t0).Seconds(), "s-500-vms-to-bound-pods")
	time.Sleep(2 * time.Second)
	b.ReportMetric(float64(rssOf(b, cmd.Process.Pid))/(1<<20), "controller-rss-MiB")
}

func rssOf(tb testing.TB, pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// scaleNodeResources are a large node's, with the device plugins' units of a node with KVM.
func scaleNodeResources() corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000"), corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"), corev1.ResourceEphemeralStorage: resource.MustParse("100Ti"),
		"devices.kubevirt.io/kvm": resource.MustParse("1000"), "devices.kubevirt.io/tun": resource.MustParse("1000"), "devices.kubevirt.io/vhost-net": resource.MustParse("1000")}
}
