package podrunner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/images"
	"github.com/qvirt/qvirt/node/launcherspec"
)

// guestStore is the image store `make guest` fills, or, when it has not, one made here from the
// guest's files.
func guestStore(t *testing.T, g testenv.Guest) *images.Store {
	t.Helper()
	dir := filepath.Join(g.Dir, "images")
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		dir = filepath.Join(t.TempDir(), "images")
	}
	s, err := images.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has("localhost/qvirt/tiny-kernel") || !s.Has("localhost/qvirt/tiny-disk") {
		if err := s.Add("localhost/qvirt/tiny-kernel", map[string]string{"/boot/vmlinuz": g.Kernel, "/boot/initrd.img": g.Initrd}); err != nil {
			t.Fatal(err)
		}
		if err := s.Add("localhost/qvirt/tiny-disk", map[string]string{"/disk/disk.qcow2": g.Disk}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// buildLauncher compiles cmd/virt-launcher, so the test runs the launcher of this checkout.
func buildLauncher(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "virt-launcher")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/virt-launcher")
	cmd.Dir = testenv.RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/virt-launcher: %v\n%s", err, b)
	}
	return out
}

// The real virt-launcher in a launcher pod whose VM images come from the store: the runner starts
// it in the pod's namespace, the VM built from the store's kernel and disk runs there, and
// deleting the pod stops it all.
func TestRealLauncher(t *testing.T) {
	g := testenv.RequireGuest(t)
	testenv.RequireQEMU(t)
	h := newHarness(t, 5)
	h.launcher = buildLauncher(t)
	h.store = guestStore(t, g)
	h.startRunner()
	h.waitSchedulable()

	pod := h.launcherPod("vm", nil, "localhost/qvirt/tiny-kernel:latest", "localhost/qvirt/tiny-disk")
	pod.Spec.Containers[0].Env = nil
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	created := time.Now()
	h.create(pod)
	p := h.waitPod("vm", 60*time.Second, "Running", running)
	t.Logf("launcher pod: created to Running in %v", time.Since(created).Round(time.Millisecond))

	sock := filepath.Join(h.vmRoot, "vm", "launcher.sock")
	waitFor(t, 30*time.Second, "launcher.sock", func() bool { _, err := os.Stat(sock); return err == nil })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := launcherapi.NewLauncherClient(conn)

	mem := resource.MustParse("256Mi")
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "vm", UID: "vmi-uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: &mem},
				Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{KernelArgs: "console=ttyS0 quiet", Container: &v1.KernelBootContainer{
					Image: "localhost/qvirt/tiny-kernel:latest", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img",
				}}},
				Devices: v1.Devices{
					Disks:                    []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}}},
					AutoattachGraphicsDevice: ptr.To(false),
				},
			},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "localhost/qvirt/tiny-disk"}}}},
		},
	}
	spec, err := launcherspec.Build(vmi, launcherspec.Env{UseEmulation: true, Images: h.store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	for st.State != launcherapi.State_STATE_RUNNING {
		if st.State == launcherapi.State_STATE_CRASHED || st.State == launcherapi.State_STATE_STOPPED {
			t.Fatalf("VM ended: %v", st)
		}
		time.Sleep(200 * time.Millisecond)
		if st, err = client.Status(ctx, &launcherapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	qemu := int(st.QemuPid)
	t.Logf("VM running %v after the pod was created (QEMU pid %d)", time.Since(created).Round(time.Millisecond), qemu)

	// QEMU runs in the pod's network namespace and in its session, so the pod's end reaches it.
	sb, err := (&Runner{opts: Options{StateDir: h.stateDir}}).loadState(string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := netnsInode(netnsPath(podNetns(p.UID)))
	if got, _ := netnsInode(fmt.Sprintf("/proc/%d/ns/net", qemu)); got != want {
		t.Errorf("QEMU in netns %d, want the pod's %d", got, want)
	}
	if qs, err := readStat(qemu); err != nil || qs.session != sb.Shim.Pid {
		t.Errorf("QEMU session %d (%v), want the pod's %d", qs.session, err, sb.Shim.Pid)
	}

	deleted := time.Now()
	h.delete("vm")
	h.waitGone("vm", 60*time.Second)
	t.Logf("launcher pod: delete to gone in %v", time.Since(deleted).Round(time.Millisecond))
	h.assertNoTrace(p, sb.Launcher.Pid, qemu)
	if v := h.veths(); len(v) != 0 {
		t.Errorf("veths left: %v", v)
	}
}
