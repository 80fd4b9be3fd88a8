package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestQEMUCrashFailsTheVMI: QEMU killed with SIGKILL inside a running VM's launcher pod. Its VMI
// goes Failed, with the crash as the reason (seen on a watch: the VM replaces a Failed VMI at
// once), and the VM (runStrategy Always) boots its next VMI to a shell.
func TestQEMUCrashFailsTheVMI(t *testing.T) {
	c := localStack(t)
	startVM(t, c, vmManifest("crashy", e2eNodes[0], "masquerade"))
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", "crashy", "--wait=false").Run() })
	first := getVMI(t, c, "crashy")
	qemu := qemuPIDs(t, c, first)
	if len(qemu) != 1 {
		t.Fatalf("QEMU processes: %v", qemu)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	failed := watchPhase(t, ctx, c, "crashy", first, v1.Failed)
	if err := syscall.Kill(qemu[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case vmi := <-failed:
		ready := condition(vmi, v1.VirtualMachineInstanceReady)
		if ready == nil || ready.Reason != "Crashed" || !strings.Contains(ready.Message, "killed") {
			t.Errorf("the Failed VMI's Ready condition does not name the crash: %+v", ready)
		}
	case <-ctx.Done():
		t.Fatal("the VMI was never seen Failed after QEMU was killed")
	}

	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi := &v1.VirtualMachineInstance{}
		if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: "crashy"}, vmi); err != nil {
			return false, nil
		}
		return vmi.UID != first.UID && vmi.Status.Phase == v1.Running, nil
	})
	if err != nil {
		t.Fatalf("no next VMI Running after the crash: %v", err)
	}
	ws := stream(t, c, "virtualmachineinstances/crashy/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	if len(alive(qemu)) != 0 {
		t.Errorf("the crashed QEMU %v still runs", qemu)
	}
}

// watchPhase delivers the first state of vmi (by UID) in phase, as a watch sees it. The watch
// starts from vmi's resourceVersion, so no transition after it is missed.
func watchPhase(t *testing.T, ctx context.Context, c *localcluster.Cluster, name string, vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) <-chan *v1.VirtualMachineInstance {
	t.Helper()
	wc, err := client.NewWithWatch(c.K8s.RESTConfig(), client.Options{Scheme: kv(t, c).Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1.VirtualMachineInstanceList{}, client.InNamespace(vmi.Namespace),
		client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: vmi.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *v1.VirtualMachineInstance, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			got, ok := ev.Object.(*v1.VirtualMachineInstance)
			if !ok || ev.Type == watch.Error || got.UID != vmi.UID {
				continue
			}
			if got.Status.Phase == phase {
				out <- got
				return
			}
		}
	}()
	return out
}
