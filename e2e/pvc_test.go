package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// pvcVMManifest is the tiny guest with a second disk, data, on the claim named.
func pvcVMManifest(name, claim string) string {
	m := vmManifest(name, "", "masquerade")
	m = strings.Replace(m, "          - name: rootdisk\n            disk: {bus: virtio}\n",
		"          - name: rootdisk\n            disk: {bus: virtio}\n          - name: data\n            disk: {bus: virtio}\n", 1)
	return m + "      - name: data\n        persistentVolumeClaim: {claimName: " + claim + "}\n"
}

// TestAFilesystemClaimKeepsTheGuestsDataAcrossARestart: a VM with a disk on a
// PersistentVolumeClaim of the cluster's default class. virt-controller waits for the claim,
// mounts it and records it on the VMI; the launcher creates disk.img at the claim's size less
// the filesystem overhead; the guest writes the disk, the VM is stopped and started again (a new
// pod, a new VMI), and the guest reads back what it wrote. A ReadWriteOnce claim is not
// live-migratable, with KubeVirt's reason.
func TestAFilesystemClaimKeepsTheGuestsDataAcrossARestart(t *testing.T) {
	c := localStack(t)
	kvc := kv(t, c)
	kube := c.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name, claim = "pvc-vm", "pvc-vm-data"
	t.Cleanup(func() {
		_ = c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").Run()
		_ = kube.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
	})

	// The VMI waits for a claim that does not exist yet.
	manifest := pvcVMManifest(name, claim)
	f := filepath.Join(t.TempDir(), "vm.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.K8s.Kubectl("apply", "-f", f).CombinedOutput(); err != nil {
		t.Fatalf("apply: %v: %s", err, out)
	}
	vmi := &v1.VirtualMachineInstance{}
	var sync *v1.VirtualMachineInstanceCondition
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
			return false, nil
		}
		sync = condition(vmi, "Synchronized")
		return sync != nil && sync.Reason == "FailedPvcNotFound", nil
	}); err != nil {
		t.Fatalf("VMI phase %s, Synchronized %+v: want FailedPvcNotFound", vmi.Status.Phase, sync)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}}}
	if _, err := kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		return kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi) == nil && vmi.Status.Phase == v1.Running, nil
	}); err != nil {
		dumpVM(t, c, name)
		t.Fatalf("VMI phase %s once the claim exists; conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
	}

	var info *v1.PersistentVolumeClaimInfo
	for _, vs := range vmi.Status.VolumeStatus {
		if vs.Name == "data" {
			info = vs.PersistentVolumeClaimInfo
		}
	}
	if info == nil || info.ClaimName != claim || info.VolumeMode == nil || *info.VolumeMode != corev1.PersistentVolumeFilesystem ||
		len(info.AccessModes) != 1 || info.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("volumeStatus of data: %+v", info)
	}
	if cond := condition(vmi, v1.VirtualMachineInstanceIsMigratable); cond == nil || cond.Status != corev1.ConditionFalse ||
		cond.Reason != v1.VirtualMachineInstanceReasonDisksNotMigratable || !strings.Contains(cond.Message, claim) {
		t.Errorf("LiveMigratable %+v, want False naming the ReadWriteOnce claim", cond)
	}
	// disk.img, on the node, is 64Mi less 5.5 %, in whole MiB: 60 MiB.
	bound, err := kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("volume of %s: %v %+v", claim, err, pv)
	}
	img := filepath.Join(c.NodeKubeletPath(vmi.Status.NodeName, pv.Spec.HostPath.Path), "disk.img")
	if st, err := os.Stat(img); err != nil || st.Size() != 60<<20 {
		t.Errorf("disk.img on node %s: %v %v, want 60 MiB", vmi.Status.NodeName, st, err)
	}

	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	send(t, ws, "cat /sys/block/vdb/size; printf 'qvirt-pvc-%d\\n' $((6*7)) > /dev/vdb; sync; echo written-$((2*3))\n")
	expect(t, ws, "written-6", 30*time.Second)
	_ = ws.Close()

	first := vmi.UID
	for _, strategy := range []string{"Halted", "Always"} {
		if out, err := c.K8s.Kubectl("patch", "vm", name, "--type=merge", "-p", `{"spec":{"runStrategy":"`+strategy+`"}}`).CombinedOutput(); err != nil {
			t.Fatalf("runStrategy %s: %v: %s", strategy, err, out)
		}
		if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi)
			if strategy == "Halted" {
				return apierrors.IsNotFound(err), nil
			}
			return err == nil && vmi.UID != first && vmi.Status.Phase == v1.Running, nil
		}); err != nil {
			t.Fatalf("runStrategy %s: VMI %s phase %s", strategy, vmi.UID, vmi.Status.Phase)
		}
	}
	ws = stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	send(t, ws, "head -c 13 /dev/vdb\n")
	expect(t, ws, "qvirt-pvc-42", 30*time.Second)
}

// TestABlockClaimIsTheGuestsDisk: a Block PersistentVolume (a loop device on the node, as a
// local volume) claimed with volumeMode Block is handed to the launcher as a device and to QEMU
// as a host_device: what the guest writes to its disk is on the node's device.
func TestABlockClaimIsTheGuestsDisk(t *testing.T) {
	c := localStack(t)
	kube := c.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const name, claim, class = "block-vm", "block-vm-data", "qvirt-e2e-block"
	backing := filepath.Join(t.TempDir(), "block.img")
	if err := os.WriteFile(backing, make([]byte, 32<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	pvName := "qvirt-e2e-block-" + strings.TrimPrefix(loop, "/dev/")
	t.Cleanup(func() {
		_ = c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").Run()
		_ = kube.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
		_ = kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
		_ = exec.Command("losetup", "--detach", loop).Run()
	})
	block := corev1.PersistentVolumeBlock
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:                    &block,
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: loop}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{e2eNodes[0]}}},
			}}}},
		}}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class), VolumeMode: &block, VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}}}}
	if _, err := kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startVM(t, c, pvcVMManifest(name, claim))
	vmi := getVMI(t, c, name)
	pod := launcherPod(t, c, vmi)
	if devs := pod.Spec.Containers[0].VolumeDevices; len(devs) != 1 || devs[0].DevicePath != "/dev/data" {
		t.Errorf("launcher volumeDevices %+v, want the claim at /dev/data", devs)
	}
	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	send(t, ws, "printf 'qvirt-block-%d\\n' $((6*7)) > /dev/vdb; sync; echo written-$((2*3))\n")
	expect(t, ws, "written-6", 30*time.Second)
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := os.ReadFile(backing)
		return err == nil && strings.HasPrefix(string(b), "qvirt-block-42\n"), nil
	}); err != nil {
		t.Fatal("what the guest wrote to its disk is not on the node's block device")
	}
}

// TestASharedClaimMigratesWithTheVM: a ReadWriteMany claim (a hostPath volume both local nodes
// see, as shared storage does for real nodes) makes the VM live-migratable; the target pod
// mounts the same claim, QEMU hands the image over without copying it, and after the migration
// the guest reads what it wrote before, on the other node.
func TestASharedClaimMigratesWithTheVM(t *testing.T) {
	c := localStack(t)
	kube := c.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const name, claim = "shared-vm", "shared-vm-data"
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	const pvName = "qvirt-e2e-shared"
	t.Cleanup(func() {
		_ = c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").Run()
		_ = kube.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
		_ = kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	rwx := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")},
			AccessModes: rwx, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		}}
	if _, err := kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: rwx, StorageClassName: ptr.To(""), VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}}}
	if _, err := kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi, ws, _, before := guestFromManifest(t, c, name, pvcVMManifest(name, claim))
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue)
	send(t, ws, "printf 'qvirt-shared-%d\\n' $((6*7)) > /dev/vdb; sync; echo written-$((2*3))\n")
	expect(t, ws, "written-6", 30*time.Second)
	_ = ws.Close()

	mig := &v1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: name + "-move", Namespace: "default"},
		Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: name}}
	if err := kv(t, c).Create(ctx, mig); err != nil {
		t.Fatal(err)
	}
	if done := migrationOf(t, ctx, c, name); done.Status.Phase != v1.MigrationSucceeded {
		t.Fatalf("migration %s: %s (%+v)", done.Name, done.Status.Phase, done.Status.MigrationState)
	}
	after := getVMI(t, c, name)
	if after.UID != vmi.UID || after.Status.NodeName == vmi.Status.NodeName || after.Status.Phase != v1.Running {
		t.Fatalf("after the migration the VMI %s is %s on %s (it was on %s)", after.UID, after.Status.Phase, after.Status.NodeName, vmi.Status.NodeName)
	}
	ws = stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 60*time.Second)
	requireUptimeGrew(t, before, uptime(t, ws, "after"))
	send(t, ws, "echo 3 > /proc/sys/vm/drop_caches; head -c 16 /dev/vdb\n")
	expect(t, ws, "qvirt-shared-42", 30*time.Second)
}
