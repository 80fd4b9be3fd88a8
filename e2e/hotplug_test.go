package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// hotplugSetup starts a VM and makes claims of the default class; it returns the virtctl
// binary and the guest's console.
func hotplugSetup(t *testing.T, c *localcluster.Cluster, name, memory string, claims map[string]string) (string, *websocket.Conn) {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(t), "bin", "virtctl")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("bin/virtctl not built (run `make build`)")
	}
	ctx := context.Background()
	t.Cleanup(func() {
		_ = c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").Run()
		for claim := range claims {
			_ = c.Kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim, metav1.DeleteOptions{})
		}
	})
	for claim, size := range claims {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
		if _, err := c.Kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startVM(t, c, strings.Replace(vmManifest(name, "", "masquerade"), "memory: {guest: 192Mi}", "memory: {guest: "+memory+"}", 1))
	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	return bin, ws
}

// guestBlock is the guest's block devices, from /sys/block.
func guestBlock(t *testing.T, ws *websocket.Conn) []string {
	t.Helper()
	// The marker is computed by the shell, so the echoed command line does not match it.
	send(t, ws, "echo blk:$(ls /sys/block | grep -E '^(sd|vd)' | tr '\\n' ' '):END$((1+1))\n")
	out := expect(t, ws, ":END2", 20*time.Second)
	m := regexp.MustCompile(`blk:([a-z0-9 ]*):END2`).FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no block device list in %q", out)
	}
	return strings.Fields(m[len(m)-1][1])
}

// waitGuestBlock polls the guest until its block devices are want.
func waitGuestBlock(t *testing.T, ws *websocket.Conn, want string, within time.Duration) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		if got = guestBlock(t, ws); strings.Join(got, " ") == want {
			return
		}
	}
	t.Fatalf("guest block devices %v, want %s", got, want)
}

func volumeStatus(vmi *v1.VirtualMachineInstance, name string) *v1.VolumeStatus {
	for i := range vmi.Status.VolumeStatus {
		if vmi.Status.VolumeStatus[i].Name == name {
			return &vmi.Status.VolumeStatus[i]
		}
	}
	return nil
}

// TestHotpluggedDisksAppearAndLeaveTheRunningGuest: three claims are attached to a running VM
// with virtctl addvolume (two on scsi with serials, one virtio; one persisted into the VM), each
// shows in the guest's /sys/block and on the VMI as Ready with its target and attachment pod on
// the VM's node. The guest writes all three; unplugging one takes it out of the guest and the
// other two still read back what was written.
func TestHotpluggedDisksAppearAndLeaveTheRunningGuest(t *testing.T) {
	c := localStack(t)
	kvc := kv(t, c)
	const name = "hotplug-vm"
	bin, ws := hotplugSetup(t, c, name, "192Mi", map[string]string{"hp-a": "64Mi", "hp-b": "64Mi", "hp-c": "64Mi"})
	kubeconfig := c.K8s.Kubeconfig()
	if got := strings.Join(guestBlock(t, ws), " "); got != "vda" {
		t.Fatalf("guest starts with block devices %q, want vda", got)
	}

	steps := []struct {
		args []string
		want string
	}{
		{[]string{"--volume-name=hp-a", "--serial=hpa"}, "sda vda"},
		{[]string{"--volume-name=hp-b", "--serial=hpb", "--persist"}, "sda sdb vda"},
		{[]string{"--volume-name=hp-c", "--bus=virtio"}, "sda sdb vda vdb"},
	}
	for _, s := range steps {
		begin := time.Now()
		if out, errOut, code := virtctl(t, kubeconfig, bin, append([]string{"addvolume", name}, s.args...)...); code != 0 {
			t.Fatalf("virtctl addvolume %v: exit %d: %s %s", s.args, code, out, errOut)
		}
		waitGuestBlock(t, ws, s.want, 3*time.Minute)
		t.Logf("hotplug %v: %v from the request to the disk in the guest's /sys/block; %s", s.args, time.Since(begin).Round(100*time.Millisecond), attachSteps(t, c, name, begin))
	}

	vmi := &v1.VirtualMachineInstance{}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
			return false, nil
		}
		for _, v := range []string{"hp-a", "hp-b", "hp-c"} {
			if vs := volumeStatus(vmi, v); vs == nil || vs.Phase != v1.VolumeReady {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("volume statuses %+v, want hp-a, hp-b and hp-c Ready", vmi.Status.VolumeStatus)
	}
	for v, target := range map[string]string{"hp-a": "sda", "hp-b": "sdb", "hp-c": "vdb"} {
		vs := volumeStatus(vmi, v)
		if vs.Target != target || vs.HotplugVolume == nil || vs.HotplugVolume.AttachPodName == "" || vs.Reason != "VolumeReady" {
			t.Errorf("volume %s: %+v, want target %s and its attachment pod", v, vs, target)
			continue
		}
		pod, err := c.Kube.CoreV1().Pods("default").Get(context.Background(), vs.HotplugVolume.AttachPodName, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != vmi.Status.NodeName || pod.UID != vs.HotplugVolume.AttachPodUID {
			t.Errorf("attachment pod of %s: %v, node %s uid %s, want node %s uid %s", v, err, pod.Spec.NodeName, pod.UID, vmi.Status.NodeName, vs.HotplugVolume.AttachPodUID)
		}
	}
	if cond := condition(vmi, v1.VirtualMachineInstanceIsMigratable); cond == nil || cond.Status != corev1.ConditionFalse || !strings.Contains(cond.Message, "hotplugged") {
		t.Errorf("LiveMigratable %+v, want False for the hotplugged volumes", cond)
	}
	vm := &v1.VirtualMachine{}
	if err := kvc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, vm); err != nil {
		t.Fatal(err)
	}
	persisted := map[string]bool{}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		persisted[v.Name] = true
	}
	if !persisted["hp-b"] || persisted["hp-a"] || persisted["hp-c"] {
		t.Errorf("VM template volumes %v: want hp-b (--persist) only of the hotplugged ones", persisted)
	}

	send(t, ws, "for d in sda sdb vdb; do printf \"qvirt-$d\" > /dev/$d; done; sync; echo wrote-$((4*5))\n")
	expect(t, ws, "wrote-20", 30*time.Second)

	if out, errOut, code := virtctl(t, kubeconfig, bin, "removevolume", name, "--volume-name=hp-a"); code != 0 {
		t.Fatalf("virtctl removevolume: exit %d: %s %s", code, out, errOut)
	}
	// The guest's scsi disks are renamed only at its next boot: hp-b stays sdb.
	waitGuestBlock(t, ws, "sdb vda vdb", 3*time.Minute)
	send(t, ws, "echo read:$(head -c 8 /dev/sdb)+$(head -c 8 /dev/vdb):done\n")
	expect(t, ws, "read:qvirt-sd+qvirt-vd:done", 30*time.Second)

	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
			return false, nil
		}
		pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=hotplug-disk,kubevirt.io/created-by=" + string(vmi.UID)})
		return err == nil && volumeStatus(vmi, "hp-a") == nil && len(pods.Items) == 2, nil
	}); err != nil {
		t.Fatalf("after the unplug: volume status %+v, want hp-a gone with its attachment pod", volumeStatus(vmi, "hp-a"))
	}
}

// TestMemoryDumpOfARunningGuest: virtctl memory-dump get writes the guest's memory into a claim
// while the guest keeps running (its uptime grows, its console answers); the VM's
// memoryDumpRequest goes to Completed with the file name, and the file in the claim is an ELF
// core at least as large as the guest memory. virtctl memory-dump remove takes the claim off.
func TestMemoryDumpOfARunningGuest(t *testing.T) {
	c := localStack(t)
	kvc := kv(t, c)
	const name, claim = "dump-vm", "dump-claim"
	bin, ws := hotplugSetup(t, c, name, "256Mi", map[string]string{claim: "512Mi"})
	kubeconfig := c.K8s.Kubeconfig()
	before := guestUptime(t, ws)

	begin := time.Now()
	if out, errOut, code := virtctl(t, kubeconfig, bin, "memory-dump", "get", name, "--claim-name="+claim); code != 0 {
		t.Fatalf("virtctl memory-dump get: exit %d: %s %s", code, out, errOut)
	}
	vm := &v1.VirtualMachine{}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vm); err != nil {
			return false, nil
		}
		r := vm.Status.MemoryDumpRequest
		if r != nil && r.Phase == v1.MemoryDumpFailed {
			return false, fmt.Errorf("memory dump failed: %s", r.Message)
		}
		return r != nil && r.Phase == v1.MemoryDumpCompleted, nil
	}); err != nil {
		dumpVM(t, c, name)
		t.Fatalf("memoryDumpRequest %+v: %v", vm.Status.MemoryDumpRequest, err)
	}
	total := time.Since(begin)
	r := vm.Status.MemoryDumpRequest
	if r.FileName == nil || !strings.HasSuffix(*r.FileName, ".memory.dump") || r.StartTimestamp == nil || r.EndTimestamp == nil {
		t.Fatalf("memoryDumpRequest %+v: want the file name and both times", r)
	}
	after := guestUptime(t, ws)
	if after <= before {
		t.Errorf("guest uptime %v after the dump, %v before: the guest did not keep running", after, before)
	}

	pvc, err := c.Kube.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.Kube.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("volume of %s: %v", claim, err)
	}
	vmi := getVMI(t, c, name)
	file := filepath.Join(c.NodeKubeletPath(vmi.Status.NodeName, pv.Spec.HostPath.Path), *r.FileName)
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("dump file on node %s: %v", vmi.Status.NodeName, err)
	}
	defer f.Close()
	hdr := make([]byte, 64)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	const guestMemory = 256 << 20
	if string(hdr[:4]) != "\x7fELF" || hdr[4] != 2 || binary.LittleEndian.Uint16(hdr[16:]) != 4 || st.Size() < guestMemory {
		t.Errorf("dump %s: header % x, size %d: want a 64-bit ELF core (e_type 4) of at least %d bytes", *r.FileName, hdr[:20], st.Size(), guestMemory)
	}
	qemuTime := r.EndTimestamp.Sub(r.StartTimestamp.Time)
	t.Logf("memory dump of a %d MiB guest: %d bytes; %v from the request to Completed; %v as QEMU timed it (whole seconds), %.1f MiB/s over the whole request",
		guestMemory>>20, st.Size(), total.Round(100*time.Millisecond), qemuTime, float64(st.Size())/(1<<20)/total.Seconds())

	if out, errOut, code := virtctl(t, kubeconfig, bin, "memory-dump", "remove", name); code != 0 {
		t.Fatalf("virtctl memory-dump remove: exit %d: %s %s", code, out, errOut)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vm); err != nil {
			return false, nil
		}
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.MemoryDump != nil {
				return false, nil
			}
		}
		return vm.Status.MemoryDumpRequest == nil, nil
	}); err != nil {
		t.Fatalf("after memory-dump remove: request %+v", vm.Status.MemoryDumpRequest)
	}
}

// guestUptime reads /proc/uptime in the guest, in seconds.
func guestUptime(t *testing.T, ws *websocket.Conn) float64 {
	t.Helper()
	send(t, ws, "echo up:$(cut -d' ' -f1 /proc/uptime):END$((1+1))\n")
	out := expect(t, ws, ":END2", 20*time.Second)
	m := regexp.MustCompile(`up:([0-9.]+):END2`).FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no uptime in %q", out)
	}
	v, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// attachSteps says when the newest attachment pod of the VM passed each of its conditions,
// relative to begin (the pod's times are whole seconds).
func attachSteps(t *testing.T, c *localcluster.Cluster, vmName string, begin time.Time) string {
	vmi := getVMI(t, c, vmName)
	pods, err := c.Kube.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=hotplug-disk,kubevirt.io/created-by=" + string(vmi.UID)})
	if err != nil || len(pods.Items) == 0 {
		return "no attachment pod"
	}
	newest := &pods.Items[0]
	for i := range pods.Items {
		if newest.CreationTimestamp.Before(&pods.Items[i].CreationTimestamp) {
			newest = &pods.Items[i]
		}
	}
	steps := []string{fmt.Sprintf("attachment pod created +%ds", int(newest.CreationTimestamp.Sub(begin).Seconds()))}
	for _, cond := range newest.Status.Conditions {
		steps = append(steps, fmt.Sprintf("%s +%ds", cond.Type, int(cond.LastTransitionTime.Sub(begin).Seconds())))
	}
	return strings.Join(steps, ", ")
}
