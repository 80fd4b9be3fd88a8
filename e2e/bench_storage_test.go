package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkFirstStartFromAFilesystemClaim starts the tiny guest once with a data disk on a new
// 1 GiB claim of the default class (local-path: the claim binds when the pod is scheduled, the
// provisioner makes its directory, the launcher creates the 968 MiB disk.img) and once without
// it, in the same run, and reports for each: `kubectl apply` -> VMI Running, and -> the guest's
// shell prompt on the serial console (the guest sees the disk as vdb). The ratio is what the claim
// adds to a first start.
func BenchmarkFirstStartFromAFilesystemClaim(b *testing.B) {
	c := localStack(b)
	warmNodes(b, c)
	for _, withClaim := range []bool{false, true} {
		b.Run(fmt.Sprintf("claim=%v", withClaim), func(b *testing.B) {
			name, claim := "bench-plain", "bench-claim"
			manifest := vmManifest(name, "", "masquerade")
			if withClaim {
				name = "bench-pvc"
				manifest = pvcVMManifest(name, claim)
				pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
				if _, err := c.Kube.CoreV1().PersistentVolumeClaims("default").Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					_ = c.Kube.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
				})
			}
			b.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").Run() })
			begin := time.Now()
			startVM(b, c, manifest)
			running := time.Since(begin)
			ws := stream(b, c, "virtualmachineinstances/"+name+"/console")
			send(b, ws, "\n")
			expect(b, ws, "qvirt# ", 2*time.Minute)
			prompt := time.Since(begin)
			b.ReportMetric(running.Seconds(), "s-apply-to-running")
			b.ReportMetric(prompt.Seconds(), "s-apply-to-prompt")
		})
	}
}
