package handler

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/launcher/server"
)

func launcherPodOf(uid, vmi, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "virt-launcher-" + vmi + "-" + uid[:4], Labels: map[string]string{
			v1.AppLabel: v1.VirtLauncherAppLabelValue, v1.CreatedByLabel: uid, vmiNameLabel: vmi}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func vmiOf(uid, name, node string) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Status: v1.VirtualMachineInstanceStatus{NodeName: node}}
}

// shortTempDir keeps socket paths under a VM directory within the 108 bytes of sun_path.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func sweepReader(t *testing.T, objs ...client.Object) *fake.ClientBuilder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} })
}

// vmDirWithFiles makes a VM directory as a launcher leaves it: a cloud-init ISO, logs, a
// stale socket, and a link (to keep) out of it.
func vmDirWithFiles(t *testing.T, root, uid, keep string) string {
	t.Helper()
	d := filepath.Join(root, uid)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(d, "disks"), 0o750))
	must(os.WriteFile(filepath.Join(d, "disks", "cloudinit.iso"), []byte("user-data"), 0o640))
	must(os.WriteFile(filepath.Join(d, "serial0.log"), []byte("boot"), 0o640))
	must(os.Symlink(keep, filepath.Join(d, "disks", "link")))
	l, err := net.Listen("unix", filepath.Join(d, "serial0.sock"))
	must(err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return d
}

const (
	uidRunning     = "11111111-1111-1111-1111-111111111111"
	uidNoPod       = "22222222-2222-2222-2222-222222222222"
	uidEndedVMI    = "33333333-3333-3333-3333-333333333333"
	uidEndedGone   = "44444444-4444-4444-4444-444444444444"
	uidLauncherUp  = "55555555-5555-5555-5555-555555555555"
	uidReplaced    = "66666666-6666-6666-6666-666666666666"
	uidTracked     = "77777777-7777-7777-7777-777777777777"
	uidOtherNode   = "88888888-8888-8888-8888-888888888888"
	uidMovedAway   = "99999999-9999-9999-9999-999999999999"
	uidOtherNodeVM = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
)

func TestSweepRemovesTheDirectoriesOfVMsGoneFromTheNode(t *testing.T) {
	base := shortTempDir(t)
	root := filepath.Join(base, "vms")
	keep := filepath.Join(base, "keep")
	if err := os.WriteFile(keep, []byte("not the VM's"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{uidRunning, uidNoPod, uidEndedVMI, uidEndedGone, uidLauncherUp, uidReplaced, uidTracked, uidOtherNode, uidMovedAway} {
		vmDirWithFiles(t, root, uid, keep)
	}
	os.Remove(filepath.Join(root, uidLauncherUp, server.SocketName))
	up, err := net.Listen("unix", filepath.Join(root, uidLauncherUp, server.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	// Not VM directories: never touched.
	os.MkdirAll(filepath.Join(root, "lost+found"), 0o755)
	os.WriteFile(filepath.Join(root, uidOtherNodeVM), nil, 0o644)

	r := sweepReader(t,
		launcherPodOf(uidRunning, "running", "node01", corev1.PodRunning),
		launcherPodOf(uidEndedVMI, "ended", "node01", corev1.PodFailed), vmiOf(uidEndedVMI, "ended", "node01"),
		launcherPodOf(uidEndedGone, "gone", "node01", corev1.PodSucceeded),
		launcherPodOf(uidReplaced, "again", "node01", corev1.PodSucceeded), vmiOf("bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb", "again", "node01"),
		launcherPodOf(uidOtherNode, "elsewhere", "node02", corev1.PodRunning),
		launcherPodOf(uidMovedAway, "moved", "node01", corev1.PodFailed), vmiOf(uidMovedAway, "moved", "node02"),
	).Build()
	h := New(nil, Options{NodeName: "node01", VMDirRoot: root, LauncherUID: os.Geteuid()})
	h.state(vmiOf(uidTracked, "tracked", "node01"), true)

	if err := h.sweepDirs(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[string]bool{
		uidRunning: true, uidEndedVMI: true, uidLauncherUp: true, uidTracked: true,
		uidNoPod: false, uidEndedGone: false, uidReplaced: false, uidMovedAway: false,
		// Its pod runs on another node: nothing runs it here.
		uidOtherNode: false,
	} {
		_, err := os.Lstat(filepath.Join(root, uid))
		if kept := err == nil; kept != want {
			t.Errorf("directory %s kept=%v, want %v (%v)", uid, kept, want, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the file a link in a VM directory pointed to was removed: %v", err)
	}
	for _, p := range []string{"lost+found", uidOtherNodeVM} {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s, not a VM directory, was touched: %v", p, err)
		}
	}
}

func TestSweepKeepsEverythingWhenTheAPIFails(t *testing.T) {
	root := filepath.Join(shortTempDir(t), "vms")
	vmDirWithFiles(t, root, uidNoPod, "/nonexistent")
	vmDirWithFiles(t, root, uidEndedVMI, "/nonexistent")
	r := sweepReader(t, launcherPodOf(uidEndedVMI, "ended", "node01", corev1.PodFailed))
	h := New(nil, Options{NodeName: "node01", VMDirRoot: root})
	boom := errors.New("apiserver unreachable")
	failList := r.WithInterceptorFuncs(interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return boom }}).Build()
	if err := h.sweepDirs(context.Background(), failList); !errors.Is(err, boom) {
		t.Fatalf("sweep error %v", err)
	}
	for _, uid := range []string{uidNoPod, uidEndedVMI} {
		if _, err := os.Stat(filepath.Join(root, uid)); err != nil {
			t.Errorf("a directory was removed without a list of the node's pods: %v", err)
		}
	}
	failGet := sweepReader(t, launcherPodOf(uidEndedVMI, "ended", "node01", corev1.PodFailed)).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return boom
		}}).Build()
	if err := h.sweepDirs(context.Background(), failGet); !errors.Is(err, boom) {
		t.Fatalf("sweep error %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, uidEndedVMI)); err != nil {
		t.Errorf("a directory was removed though its VMI could not be read: %v", err)
	}
}

func TestSweeperSweepsAtStartAndWhenAVMGoes(t *testing.T) {
	root := filepath.Join(shortTempDir(t), "vms")
	vmDirWithFiles(t, root, uidNoPod, "/nonexistent")
	h := New(nil, Options{NodeName: "node01", VMDirRoot: root})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- DirSweeper{H: h, Reader: sweepReader(t).Build(), Interval: time.Hour}.Start(ctx) }()
	gone := func(uid string) bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Lstat(filepath.Join(root, uid)); errors.Is(err, fs.ErrNotExist) {
				return true
			}
		}
		return false
	}
	if !gone(uidNoPod) {
		t.Fatal("the start-up sweep left the directory of a VM with no launcher pod")
	}
	vmDirWithFiles(t, root, uidEndedGone, "/nonexistent")
	h.sweepSoon()
	if !gone(uidEndedGone) {
		t.Fatal("a sweep asked for did not remove the directory")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
