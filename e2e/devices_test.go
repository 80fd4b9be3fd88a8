package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/node/deviceplugin"
)

// hostDevices maps each device the node agents offer to whether this machine has it: the
// local cluster's nodes share the host's /dev.
func hostDevices() map[deviceplugin.Device]bool {
	out := map[deviceplugin.Device]bool{}
	for _, d := range deviceplugin.Permanent {
		_, err := os.Stat(d.Path)
		out[d] = err == nil
	}
	return out
}

// TestNodesOfferTheirDevicesThroughTheKubelet: every node agent registers its device plugins
// with its node's real kubelet, so each node's capacity lists devices.kubevirt.io/kvm, tun and
// vhost-net, and its allocatable count is zero for a device the host lacks.
func TestNodesOfferTheirDevicesThroughTheKubelet(t *testing.T) {
	c := localStack(t)
	kube := c.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range e2eNodes {
		var last string
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = ""
			for d, present := range hostDevices() {
				res := corev1.ResourceName(d.ResourceName())
				capacity, alloc := n.Status.Capacity[res], n.Status.Allocatable[res]
				want := int64(0)
				if present {
					want = deviceplugin.DefaultCount
				}
				if capacity.Value() != deviceplugin.DefaultCount || alloc.Value() != want {
					last += fmt.Sprintf("%s: capacity %s allocatable %s, want %d and %d; ", res, capacity.String(), alloc.String(), deviceplugin.DefaultCount, want)
				}
			}
			return last == "", nil
		})
		if err != nil {
			t.Fatalf("node %s: %s", name, last)
		}
	}
}

// TestWithoutKVMAHardwareVMIsUnschedulable: with useEmulation off, a launcher pod requests
// devices.kubevirt.io/kvm; on nodes without /dev/kvm none offers it, so the VMI stays
// unscheduled with the scheduler's reason, as in KubeVirt, instead of failing on a node.
func TestWithoutKVMAHardwareVMIsUnschedulable(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this machine has /dev/kvm, so its nodes offer kvm: a hardware VM would be scheduled")
	}
	c := localStack(t)
	kvc := kv(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	setEmulation(t, kvc, false)
	t.Cleanup(func() { setEmulation(t, kvc, true) })
	vmi := newTinyVMI(t, "needs-kvm")
	t.Cleanup(func() { _ = kvc.Delete(context.Background(), vmi) })
	if err := kvc.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	var cond *v1.VirtualMachineInstanceCondition
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, nil
		}
		cond = condition(vmi, v1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable, nil
	})
	if err != nil {
		t.Fatalf("VMI phase %s, PodScheduled %+v: want Unschedulable", vmi.Status.Phase, cond)
	}
	if !strings.Contains(cond.Message, "Insufficient devices.kubevirt.io/kvm") {
		t.Errorf("PodScheduled message %q does not name the missing kvm device", cond.Message)
	}
	if vmi.Status.Phase == v1.Failed || vmi.Status.Phase == v1.Running {
		t.Errorf("VMI phase %s, want it waiting", vmi.Status.Phase)
	}
	pod := launcherPod(t, c, vmi)
	if q := pod.Spec.Containers[0].Resources.Limits["devices.kubevirt.io/kvm"]; q.Value() != 1 {
		t.Errorf("launcher pod limits %v, want devices.kubevirt.io/kvm: 1", pod.Spec.Containers[0].Resources.Limits)
	}
}

// requireDevicesFromPlugins checks a running launcher pod of an emulated VM: it asks the
// device plugins for tun and not for kvm, runs unprivileged and mounts no host /dev.
func requireDevicesFromPlugins(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	compute := pod.Spec.Containers[0]
	if q := compute.Resources.Limits["devices.kubevirt.io/tun"]; q.Value() != 1 {
		t.Errorf("limits %v, want devices.kubevirt.io/tun: 1", compute.Resources.Limits)
	}
	for _, res := range []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/vhost-net"} {
		if _, ok := compute.Resources.Limits[res]; ok {
			t.Errorf("an emulated guest's pod requests %s", res)
		}
	}
	if sc := compute.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Error("the launcher container is privileged")
	}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, "/dev") {
			t.Errorf("volume %s mounts the host's %s", v.Name, v.HostPath.Path)
		}
	}
}

// newTinyVMI is the tiny guest as a standalone VMI in namespace default.
func newTinyVMI(t *testing.T, name string) *v1.VirtualMachineInstance {
	t.Helper()
	var m v1.VirtualMachine
	if err := yaml.Unmarshal([]byte(vmManifest(name, "", "masquerade")), &m); err != nil {
		t.Fatal(err)
	}
	vmi := &v1.VirtualMachineInstance{Spec: *m.Spec.Template.Spec.DeepCopy()}
	vmi.Namespace, vmi.Name = "default", name
	return vmi
}

// setEmulation sets the KubeVirt CR's developerConfiguration.useEmulation.
func setEmulation(t *testing.T, kvc client.Client, on bool) {
	t.Helper()
	kvObj := &v1.KubeVirt{}
	kvObj.Namespace, kvObj.Name = localcluster.Namespace, "kubevirt"
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"configuration":{"developerConfiguration":{"useEmulation":%t}}}}`, on)))
	if err := kvc.Patch(context.Background(), kvObj, patch); err != nil {
		t.Fatalf("KubeVirt CR useEmulation %t: %v", on, err)
	}
}

// requireUnprivilegedLauncher checks, from the host's /proc, that every process of the VM's
// compute container (virt-launcher, QEMU) runs as the qemu user with no capability, and that its
// pod has no hostPath (Pod Security baseline admitted it in its namespace).
func requireUnprivilegedLauncher(t *testing.T, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("launcher pod volume %s is a hostPath (%s)", v.Name, v.HostPath.Path)
		}
	}
	for _, pid := range qemuPIDs(t, c, vmi) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		if fields["Uid"] != "107 107 107 107" || fields["Gid"] != "107 107 107 107" {
			t.Errorf("QEMU %d runs as uid %q gid %q, want the qemu user 107", pid, fields["Uid"], fields["Gid"])
		}
		if fields["CapEff"] != "0000000000000000" || fields["CapPrm"] != "0000000000000000" {
			t.Errorf("QEMU %d has capabilities: effective %s permitted %s", pid, fields["CapEff"], fields["CapPrm"])
		}
		if fields["NoNewPrivs"] != "1" {
			t.Errorf("QEMU %d may gain privileges (NoNewPrivs %q)", pid, fields["NoNewPrivs"])
		}
	}
}
