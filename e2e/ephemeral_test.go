package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestBlankDisksCountAsThePodsEphemeralStorage: an emptyDisk lives in the launcher pod's own
// writable space and its capacity is part of the pod's ephemeral-storage request, so the
// kubelet accounts what the guest writes to it to the pod (its stats summary), which is what it
// evicts by under disk pressure.
func TestBlankDisksCountAsThePodsEphemeralStorage(t *testing.T) {
	c := localStack(t)
	const name = "scratchy"
	manifest := strings.Replace(vmManifest(name, "", "masquerade"), "          - name: rootdisk\n            disk: {bus: virtio}\n",
		"          - name: rootdisk\n            disk: {bus: virtio}\n          - name: scratch\n            disk: {bus: virtio}\n", 1) +
		"      - name: scratch\n        emptyDisk: {capacity: 48Mi}\n"
	startVM(t, c, manifest)
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=false").Run() })
	vmi := getVMI(t, c, name)
	pod := launcherPod(t, c, vmi)
	want := resource.MustParse("48Mi")
	want.Add(resource.MustParse("50M"))
	if got := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage]; got.Cmp(want) != 0 {
		t.Errorf("ephemeral-storage request %s, want %s (the blank disk and the launcher's overhead)", got.String(), want.String())
	}

	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	send(t, ws, "dd if=/dev/zero of=/dev/vdb bs=1M count=40 2>/dev/null; sync; echo filled-$((4*10))\n")
	expect(t, ws, "filled-40", 2*time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var used uint64
	// The kubelet measures volumes about once a minute.
	err := wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := c.K8s.Kubectl("get", "--raw", "/api/v1/nodes/"+vmi.Status.NodeName+"/proxy/stats/summary").Output()
		if err != nil {
			return false, nil
		}
		var summary struct {
			Pods []struct {
				PodRef struct {
					Name, Namespace string
				} `json:"podRef"`
				Ephemeral *struct {
					UsedBytes *uint64 `json:"usedBytes"`
				} `json:"ephemeral-storage"`
			} `json:"pods"`
		}
		if json.Unmarshal(out, &summary) != nil {
			return false, nil
		}
		for _, p := range summary.Pods {
			if p.PodRef.Name == pod.Name && p.PodRef.Namespace == pod.Namespace && p.Ephemeral != nil && p.Ephemeral.UsedBytes != nil {
				used = *p.Ephemeral.UsedBytes
			}
		}
		return used >= 40<<20, nil
	})
	if err != nil {
		t.Fatalf("the kubelet accounts %d bytes of ephemeral storage to the launcher pod, want at least the 40 MiB the guest wrote", used)
	}
}
