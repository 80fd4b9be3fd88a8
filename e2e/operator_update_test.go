package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// consoleUptime reads the guest's uptime over a new console session.
func consoleUptime(t *testing.T, c *localcluster.Cluster, vmi string) float64 {
	t.Helper()
	ws := stream(t, c, "virtualmachineinstances/"+vmi+"/console")
	defer ws.Close()
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 90*time.Second)
	return guestUptime(t, ws)
}

func setImageTag(t *testing.T, c *localcluster.Cluster, tag string) {
	t.Helper()
	patch := `{"spec":{"imageTag":null}}`
	if tag != "" {
		patch = `{"spec":{"imageTag":"` + tag + `"}}`
	}
	kvr := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}}
	if err := kv(t, c).Patch(context.Background(), kvr, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// waitVersion waits for the CR to be Available at version and returns the Progressing reasons
// seen meanwhile.
func waitVersion(t *testing.T, c *localcluster.Cluster, version string) []string {
	t.Helper()
	var reasons []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 8*time.Minute, true, func(context.Context) (bool, error) {
		kvr := kubeVirtCR(t, c)
		if p := kvCondition(kvr, v1.KubeVirtConditionProgressing); p != nil && p.Status == corev1.ConditionTrue && (len(reasons) == 0 || reasons[len(reasons)-1] != p.Reason) {
			reasons = append(reasons, p.Reason)
		}
		a := kvCondition(kvr, v1.KubeVirtConditionAvailable)
		return kvr.Status.ObservedKubeVirtVersion == version && a != nil && a.Status == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("not Available at %s: %v; status %+v", version, err, kubeVirtCR(t, c).Status)
	}
	return reasons
}

func TestANewImageTagRollsTheComponentsWhileVMsKeepRunning(t *testing.T) {
	c := localStack(t)
	ctx := context.Background()
	const next = "v0.1.1-e2e"
	if err := c.PushComponentImages(ctx, next); err != nil {
		t.Fatal(err)
	}
	const name = "survives-update"
	startVM(t, c, vmManifest(name, "", "masquerade"))
	t.Cleanup(func() { _ = c.DeleteVMs(context.Background()) })
	vmi := getVMI(t, c, name)
	pod := launcherPod(t, c, vmi)
	before := consoleUptime(t, c, name)

	// The node agents move one node at a time: never are all of them down at once.
	var mu sync.Mutex
	minReady := int32(1 << 30)
	watchCtx, stopWatch := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for watchCtx.Err() == nil {
			if ds, err := c.Kube.AppsV1().DaemonSets("kubevirt").Get(watchCtx, "virt-handler", metav1.GetOptions{}); err == nil {
				mu.Lock()
				minReady = min(minReady, ds.Status.NumberReady)
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	began := time.Now()
	setImageTag(t, c, next)
	t.Cleanup(func() {
		setImageTag(t, c, "")
		waitVersion(t, c, localcluster.ComponentTag)
	})
	reasons := waitVersion(t, c, next)
	stopWatch()
	<-done
	t.Logf("imageTag %s -> Available at it: %v; Progressing reasons seen: %v", next, time.Since(began).Round(time.Millisecond), reasons)
	if !strings.Contains(strings.Join(reasons, " "), "UpdateInProgress") {
		t.Errorf("Progressing reasons %v, want UpdateInProgress during the update", reasons)
	}
	if minReady < 1 {
		t.Errorf("at one point %d virt-handler pods were ready: the rollout was not node by node", minReady)
	}
	for _, d := range []string{"virt-api", "virt-controller"} {
		dep, err := c.Kube.AppsV1().Deployments("kubevirt").Get(ctx, d, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != "qvirt/"+d+":"+next {
			t.Errorf("%s runs %s after the update", d, img)
		}
		if d == "virt-controller" && !strings.Contains(strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "), "--launcher-image=qvirt/virt-launcher:"+next) {
			t.Errorf("virt-controller's launcher image not moved: %v", dep.Spec.Template.Spec.Containers[0].Args)
		}
	}
	pods, err := c.Kube.CoreV1().Pods("kubevirt").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-handler"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if img := p.Spec.Containers[0].Image; img != "qvirt/virt-handler:"+next {
			t.Errorf("handler pod %s runs %s", p.Name, img)
		}
	}
	// The VM ran through it: same VMI, same launcher pod, the guest never rebooted.
	after := getVMI(t, c, name)
	if after.UID != vmi.UID || after.Status.Phase != v1.Running {
		t.Errorf("VMI after the update: uid %s (was %s), phase %s", after.UID, vmi.UID, after.Status.Phase)
	}
	if p := launcherPod(t, c, after); p.UID != pod.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("launcher pod after the update: uid %s (was %s), restarts %d", p.UID, pod.UID, p.Status.ContainerStatuses[0].RestartCount)
	}
	if up := consoleUptime(t, c, name); up <= before {
		t.Errorf("guest uptime %.0f s after the update, %.0f s before: it rebooted", up, before)
	} else {
		t.Logf("guest uptime %.0f s before, %.0f s after", before, up)
	}
}
