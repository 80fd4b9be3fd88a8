package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// TestGuestAgentReportsTheGuest: the guest's qemu-ga on the org.qemu.guest_agent.0 channel
// every VM gets. The VMI shows AgentConnected, the guest's OS and the guest's name of its NIC
// (a masquerade NIC keeps the pod's address); virtctl guestosinfo, userlist and fslist answer
// from the agent. Stopping the agent in the guest removes the condition and the subresources
// answer 409 (no agent connected); starting it again brings both back.
func TestGuestAgentReportsTheGuest(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	c := localStack(t)
	const name = "agent"
	vmi, ws, _, _ := guestWithConsole(t, c, name, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue)
	got := getVMI(t, c, name)
	if os := got.Status.GuestOSInfo; os.ID != "qvirt-tiny" || os.VersionID != "1" || os.KernelRelease == "" || os.Machine != "x86_64" {
		t.Errorf("guestOSInfo: %+v", os)
	}
	if ifs := got.Status.Interfaces; len(ifs) != 1 || ifs[0].InterfaceName != "eth0" || ifs[0].InfoSource != "domain, guest-agent" || ifs[0].IP != vmi.Status.Interfaces[0].IP {
		t.Errorf("interfaces with the agent: %+v (before: %+v)", ifs, vmi.Status.Interfaces)
	}
	for sub, want := range map[string]string{"guestosinfo": `"id": "qvirt-tiny"`, "userlist": `"items"`, "fslist": `"mountPoint": "/mnt/data"`} {
		stdout, stderr, code := virtctl(t, kubeconfig, bin, sub, name)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("virtctl %s: exit %d, %q %q", sub, code, stdout, stderr)
		}
	}

	send(t, ws, "kill $(cat /run/qemu-ga.pid)\n")
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return condition(getVMI(t, c, name), v1.VirtualMachineInstanceAgentConnected) == nil, nil
	}); err != nil {
		t.Fatalf("AgentConnected stays after the agent stopped: %+v", condition(getVMI(t, c, name), v1.VirtualMachineInstanceAgentConnected))
	}
	if _, stderr, code := virtctl(t, kubeconfig, bin, "guestosinfo", name); code == 0 || !strings.Contains(stderr, "VMI does not have guest agent connected") {
		t.Errorf("virtctl guestosinfo without the agent: exit %d, %q", code, stderr)
	}

	send(t, ws, `for p in /sys/class/virtio-ports/*; do [ "$(cat $p/name)" = org.qemu.guest_agent.0 ] && qemu-ga -m virtio-serial -p /dev/${p##*/} -d -f /run/qemu-ga.pid -t /run; done`+"\n")
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue)
}
