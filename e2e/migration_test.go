package e2e

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// markRAM writes a marker into a tmpfs of the guest: it lives only in the guest's RAM, so
// finding it after a move shows the memory moved. The shell computes the marker, so the echo
// of the typed command never matches it.
func markRAM(t *testing.T, ws *websocket.Conn) {
	t.Helper()
	send(t, ws, "mkdir -p /run/mark && mount -t tmpfs tmpfs /run/mark && echo ram-$((1000+234)) > /run/mark/m && echo marked-$((40+2))\n")
	expect(t, ws, "marked-42", 30*time.Second)
}

func requireMarker(t *testing.T, ws *websocket.Conn) {
	t.Helper()
	send(t, ws, "cat /run/mark/m\n")
	expect(t, ws, "ram-1234", 30*time.Second)
}

// migrationOf waits for the newest migration of vmi to end and returns it.
func migrationOf(t *testing.T, ctx context.Context, c *localcluster.Cluster, vmi string) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	var found *v1.VirtualMachineInstanceMigration
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var list v1.VirtualMachineInstanceMigrationList
		if err := kv(t, c).List(ctx, &list, client.InNamespace("default")); err != nil {
			return false, nil
		}
		for i := range list.Items {
			m := &list.Items[i]
			if m.Spec.VMIName == vmi && (m.Status.Phase == v1.MigrationSucceeded || m.Status.Phase == v1.MigrationFailed) {
				found = m
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no migration of %s ended: %v", vmi, err)
	}
	return found
}

func phasesOf(m *v1.VirtualMachineInstanceMigration) []v1.VirtualMachineInstanceMigrationPhase {
	var out []v1.VirtualMachineInstanceMigrationPhase
	for _, p := range m.Status.PhaseTransitionTimestamps {
		out = append(out, p.Phase)
	}
	return out
}

// waitOnePod waits until the VMI has a single launcher pod, on node.
func waitOnePod(t *testing.T, ctx context.Context, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods := launcherPods(t, c, vmi)
		if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != node {
			return false, nil
		}
		pod = &pods.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s never had one launcher pod on %s: %v", vmi.Name, node, err)
	}
	return pod
}

// TestLiveMigration: a running guest marks its RAM and is migrated with virtctl. The migration
// goes through KubeVirt's phases to Succeeded; the VMI (same uid) runs on the other node with
// its marker, an uptime that kept growing, one launcher pod (the source's is gone), and its
// console and port-forward served there.
func TestLiveMigration(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	c := localStack(t)
	const name = "mover"
	vmi, ws, _, _ := guestWithConsole(t, c, name, "")
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=false").Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue)
	markRAM(t, ws)
	before := uptime(t, ws, "before")
	source := vmi.Status.NodeName

	stdout, stderr, code := virtctl(t, kubeconfig, bin, "migrate", name)
	if code != 0 || stdout != "VM "+name+" was scheduled to migrate\n" {
		t.Fatalf("virtctl migrate: exit %d, %q %q", code, stdout, stderr)
	}
	mig := migrationOf(t, ctx, c, name)
	if mig.Status.Phase != v1.MigrationSucceeded {
		t.Fatalf("migration %s: %s (%+v)", mig.Name, mig.Status.Phase, mig.Status.MigrationState)
	}
	want := []v1.VirtualMachineInstanceMigrationPhase{v1.MigrationScheduling, v1.MigrationScheduled, v1.MigrationPreparingTarget,
		v1.MigrationTargetReady, v1.MigrationRunning, v1.MigrationSucceeded}
	for _, p := range want {
		if !slices.Contains(phasesOf(mig), p) {
			t.Errorf("migration phases %v lack %s", phasesOf(mig), p)
		}
	}

	after := getVMI(t, c, name)
	ms := after.Status.MigrationState
	switch {
	case after.UID != vmi.UID:
		t.Fatalf("the VMI was replaced: uid %s -> %s", vmi.UID, after.UID)
	case after.Status.NodeName == source || after.Status.Phase != v1.Running:
		t.Fatalf("after the migration the VMI is %s on %s (it was on %s)", after.Status.Phase, after.Status.NodeName, source)
	case ms == nil || !ms.Completed || ms.Failed || ms.SourceNode != source || ms.TargetNode != after.Status.NodeName ||
		ms.StartTimestamp == nil || ms.EndTimestamp == nil || ms.Mode != v1.MigrationPreCopy || ms.MigrationUID != mig.UID:
		t.Fatalf("migrationState %+v", ms)
	}
	// The controller moves the node label after the node agents moved the VMI.
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		return getVMI(t, c, name).Labels[v1.NodeNameLabel] == after.Status.NodeName, nil
	}); err != nil {
		t.Errorf("node label %q, VMI on %s", getVMI(t, c, name).Labels[v1.NodeNameLabel], after.Status.NodeName)
	}
	if ready := condition(getVMI(t, c, name), v1.VirtualMachineInstanceReady); ready == nil || ready.Status != corev1.ConditionTrue {
		t.Errorf("the migrated VMI is not Ready: %+v", ready)
	}
	t.Logf("migrated from %s to %s in %s", source, after.Status.NodeName, ms.EndTimestamp.Sub(ms.StartTimestamp.Time))
	waitOnePod(t, ctx, c, after, after.Status.NodeName)

	// The console is served by the new node's agent: the guest kept its RAM and its clock.
	ws2 := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws2, "\n")
	requireMarker(t, ws2)
	requireUptimeGrew(t, before, uptime(t, ws2, "after"))

	lines, stop := background(t, kubeconfig, bin, "port-forward", "vm/"+name, "18081:80")
	if line := firstLine(t, lines); line != "Forwarding from 127.0.0.1:18081 -> 80" {
		t.Fatalf("port-forward: first line %q", line)
	}
	hc := &http.Client{Timeout: 15 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:18081/")
	if err != nil {
		t.Fatalf("GET through port-forward on the new node: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "qvirt-guest") {
		t.Errorf("GET through port-forward on the new node: %s %q", resp.Status, body)
	}
	if err := stop(); err != nil {
		t.Errorf("stopping virtctl port-forward: %v", err)
	}
}

// setMigrations merge-patches the KubeVirt CR's spec.configuration.migrations (JSON; "null"
// restores the defaults) and waits until every node agent logged the change.
func setMigrations(t *testing.T, c *localcluster.Cluster, migrations, seen string) {
	t.Helper()
	since := metav1.NewTime(time.Now().Add(-time.Second))
	kvObj := &v1.KubeVirt{}
	kvObj.Namespace, kvObj.Name = localcluster.Namespace, "kubevirt"
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"configuration":{"migrations":`+migrations+`}}}`))
	if err := kv(t, c).Patch(context.Background(), kvObj, patch); err != nil {
		t.Fatalf("KubeVirt CR migrations %s: %v", migrations, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, node := range e2eNodes {
		pod := handlerPod(t, c, node)
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			b, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
			return err == nil && strings.Contains(string(b), "configuration changed") && strings.Contains(string(b), seen), nil
		})
		if err != nil {
			t.Fatalf("the node agent on %s never took the migration settings %s", node, migrations)
		}
	}
}

// migrationRunning starts a migration of name with virtctl and waits for it to be Running.
func migrationRunning(t *testing.T, ctx context.Context, c *localcluster.Cluster, kubeconfig, bin, name string) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	if _, stderr, code := virtctl(t, kubeconfig, bin, "migrate", name); code != 0 {
		t.Fatalf("virtctl migrate: exit %d, %q", code, stderr)
	}
	var mig *v1.VirtualMachineInstanceMigration
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var list v1.VirtualMachineInstanceMigrationList
		if err := kv(t, c).List(ctx, &list, client.InNamespace("default")); err != nil {
			return false, nil
		}
		for i := range list.Items {
			m := &list.Items[i]
			if m.Spec.VMIName == name && m.DeletionTimestamp == nil && !migrationEnded(m) {
				mig = m
				return m.Status.Phase == v1.MigrationRunning, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the migration of %s never ran: %+v", name, mig)
	}
	return mig
}

func migrationEnded(m *v1.VirtualMachineInstanceMigration) bool {
	return m.Status.Phase == v1.MigrationSucceeded || m.Status.Phase == v1.MigrationFailed
}

// waitMigrationState waits for the VMI's migrationState of migration uid to satisfy ok.
func waitMigrationState(t *testing.T, ctx context.Context, c *localcluster.Cluster, name string, uid types.UID, ok func(*v1.VirtualMachineInstanceMigrationState) bool) *v1.VirtualMachineInstance {
	t.Helper()
	var vmi *v1.VirtualMachineInstance
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vmi = &v1.VirtualMachineInstance{}
		if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
			return false, nil
		}
		ms := vmi.Status.MigrationState
		return ms != nil && ms.MigrationUID == uid && ok(ms), nil
	})
	if err != nil {
		t.Fatalf("migrationState of %s: %+v", name, vmi.Status.MigrationState)
	}
	return vmi
}

// TestMigrationFailuresLeaveTheVMOnItsNode: a guest holding 48 MiB of random data in RAM moves
// under a 1 MiB/s limit, so each migration runs long enough to be interrupted. migrate-cancel
// aborts it (abortStatus Succeeded); killing the target's QEMU or deleting the target pod fails
// it. Each time the VM keeps running on its node with its RAM, and the target pod goes. Without
// the limit the VM then moves. A real Prometheus sees KubeVirt's migration families all along:
// the source agent's progress while one runs, virt-controller's counts and outcomes.
func TestMigrationFailuresLeaveTheVMOnItsNode(t *testing.T) {
	kubeconfig, bin, _ := cluster(t)
	c := localStack(t)
	prom := startPrometheus(t, c)
	setMigrations(t, c, `{"bandwidthPerMigration":"1Mi","progressTimeout":600,"completionTimeoutPerGiB":3000}`, `"BandwidthPerMigration":1048576`)
	t.Cleanup(func() { setMigrations(t, c, "null", `"BandwidthPerMigration":0`) })
	const name = "stayer"
	// A CPU limit (no throttling on these nodes) gives kubevirt_vm_resource_limits a series.
	manifest := strings.Replace(vmManifest(name, "", "masquerade"), "        memory: {guest: 192Mi}\n",
		"        memory: {guest: 192Mi}\n        resources: {requests: {cpu: 100m}, limits: {cpu: \"2\"}}\n", 1)
	vmi, ws, qemu, _ := guestFromManifest(t, c, name, manifest)
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=false").Run() })
	node := vmi.Status.NodeName
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue)
	// A VNC session and a port-forward tunnel, besides the console: virt-api counts each kind.
	vnc := stream(t, c, "virtualmachineinstances/"+name+"/vnc")
	expect(t, vnc, "RFB 003.008", 30*time.Second)
	pf := stream(t, c, "virtualmachineinstances/"+name+"/portforward/80/tcp")
	send(t, pf, "GET / HTTP/1.0\r\n\r\n")
	expect(t, pf, "qvirt-guest", 30*time.Second)
	markRAM(t, ws)
	send(t, ws, "dd if=/dev/urandom of=/run/mark/junk bs=1M count=48 2>/dev/null; echo filled-$((40+2))\n")
	expect(t, ws, "filled-42", 2*time.Minute)

	stillHere := func(t *testing.T) {
		t.Helper()
		after := getVMI(t, c, name)
		if after.UID != vmi.UID || after.Status.NodeName != node || after.Status.Phase != v1.Running {
			t.Fatalf("VMI %s is %s on %s, want Running on %s", after.UID, after.Status.Phase, after.Status.NodeName, node)
		}
		waitOnePod(t, ctx, c, after, node)
		if got := qemuPIDs(t, c, after); len(got) != 1 || got[0] != qemu[0] {
			t.Errorf("QEMU processes %v, want only the source's %d", got, qemu[0])
		}
		ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
		send(t, ws, "\n")
		requireMarker(t, ws)
	}

	t.Run("cancel", func(t *testing.T) {
		mig := migrationRunning(t, ctx, c, kubeconfig, bin, name)
		for _, q := range []string{
			`kubevirt_vmi_migration_data_processed_bytes{name="stayer",namespace="default",node="` + node + `"} > 0`,
			`kubevirt_vmi_migration_data_remaining_bytes{name="stayer",node="` + node + `"} > 0`,
			`kubevirt_vmi_migration_data_total_bytes{name="stayer",node="` + node + `"} > 48e6`,
			`kubevirt_vmi_migration_memory_transfer_rate_bytes{name="stayer",node="` + node + `"} > 0`,
			`kubevirt_vmi_migration_dirty_memory_rate_bytes{name="stayer",node="` + node + `"}`,
			`kubevirt_vmi_migration_disk_transfer_rate_bytes{name="stayer",node="` + node + `"}`,
			`kubevirt_vmi_migrations_in_running_phase >= 1`,
			`kubevirt_vmi_migration_start_time_seconds{name="stayer",migration_name="` + mig.Name + `"} > 0`,
		} {
			prom.waitFor(t, ctx, q)
		}
		if stdout, stderr, code := virtctl(t, kubeconfig, bin, "migrate-cancel", name); code != 0 {
			t.Fatalf("virtctl migrate-cancel: exit %d, %q %q", code, stdout, stderr)
		}
		after := waitMigrationState(t, ctx, c, name, mig.UID, func(ms *v1.VirtualMachineInstanceMigrationState) bool {
			return ms.AbortStatus != ""
		})
		ms := after.Status.MigrationState
		if !ms.Failed || !ms.AbortRequested || ms.AbortStatus != v1.MigrationAbortSucceeded || ms.Completed || ms.EndTimestamp == nil {
			t.Errorf("migrationState after the cancel: %+v", ms)
		}
		stillHere(t)
		// migrate-cancel deletes the migration, as KubeVirt's does: the VMI's migration state
		// still tells how it ended.
		prom.waitFor(t, ctx, `kubevirt_vmi_migration_end_time_seconds{name="stayer",namespace="default",status="failed"} > 0`)
	})

	t.Run("target pod deleted", func(t *testing.T) {
		mig := migrationRunning(t, ctx, c, kubeconfig, bin, name)
		target := waitMigrationState(t, ctx, c, name, mig.UID, func(ms *v1.VirtualMachineInstanceMigrationState) bool { return ms.TargetPod != "" })
		pod := target.Status.MigrationState.TargetPod
		if out, err := c.K8s.Kubectl("delete", "pod", pod, "--wait=false").CombinedOutput(); err != nil {
			t.Fatalf("kubectl delete pod %s: %v: %s", pod, err, out)
		}
		after := waitMigrationState(t, ctx, c, name, mig.UID, func(ms *v1.VirtualMachineInstanceMigrationState) bool { return ms.Failed })
		if ms := after.Status.MigrationState; ms.Completed || ms.FailureReason == "" {
			t.Errorf("migrationState after the target pod went: %+v", ms)
		}
		t.Logf("failure reason: %s", after.Status.MigrationState.FailureReason)
		stillHere(t)
		prom.waitFor(t, ctx, `kubevirt_vmi_migration_failed{vmi="stayer",vmim="`+mig.Name+`",namespace="default"} == 1`)
		prom.waitFor(t, ctx, `kubevirt_vmi_migration_end_time_seconds{name="stayer",migration_name="`+mig.Name+`",status="failed"} > 0`)
	})

	t.Run("target QEMU killed", func(t *testing.T) {
		mig := migrationRunning(t, ctx, c, kubeconfig, bin, name)
		var target []int
		for _, pid := range qemuPIDs(t, c, vmi) {
			if pid != qemu[0] {
				target = append(target, pid)
			}
		}
		if len(target) != 1 {
			t.Fatalf("target QEMU processes: %v", target)
		}
		if err := syscall.Kill(target[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitMigrationFailed(t, ctx, c, mig, "its target died")
		after := waitMigrationState(t, ctx, c, name, mig.UID, func(ms *v1.VirtualMachineInstanceMigrationState) bool { return ms.Failed })
		if ms := after.Status.MigrationState; ms.Completed || ms.FailureReason == "" {
			t.Errorf("migrationState after the target died: %+v", ms)
		}
		t.Logf("failure reason: %s", after.Status.MigrationState.FailureReason)
		stillHere(t)
	})

	t.Run("moves without the limit", func(t *testing.T) {
		setMigrations(t, c, "null", `"BandwidthPerMigration":0`)
		if _, stderr, code := virtctl(t, kubeconfig, bin, "migrate", name); code != 0 {
			t.Fatalf("virtctl migrate: exit %d, %q", code, stderr)
		}
		var mig *v1.VirtualMachineInstanceMigration
		if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var list v1.VirtualMachineInstanceMigrationList
			if err := kv(t, c).List(ctx, &list, client.InNamespace("default")); err != nil {
				return false, nil
			}
			for i := range list.Items {
				if m := &list.Items[i]; m.Spec.VMIName == name && m.Status.Phase == v1.MigrationSucceeded {
					mig = m
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("the migration of %s never succeeded: %v", name, err)
		}
		moved := getVMI(t, c, name)
		if moved.UID != vmi.UID || moved.Status.NodeName == node {
			t.Fatalf("VMI %s on %s after the migration (it was on %s)", moved.UID, moved.Status.NodeName, node)
		}
		ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
		send(t, ws, "\n")
		requireMarker(t, ws)
		for _, q := range []string{
			`kubevirt_vmi_migration_succeeded{vmi="stayer",vmim="` + mig.Name + `",namespace="default"} == 1`,
			`kubevirt_vmi_migration_end_time_seconds{name="stayer",migration_name="` + mig.Name + `",status="succeeded",node="` + moved.Status.NodeName + `"} > 0`,
			`kubevirt_vmi_migration_phase_transition_time_from_creation_seconds_count{phase="Succeeded"} > 0`,
			`kubevirt_vmi_migrations_in_running_phase == 0`,
		} {
			prom.waitFor(t, ctx, q)
		}
		// The source's progress series end with the move (Prometheus marks them stale at the
		// first scrape without them).
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := promQuery(ctx, prom.addr, `kubevirt_vmi_migration_data_processed_bytes{name="stayer"}`)
			return err == nil && n == 0, nil
		}); err != nil {
			t.Errorf("migration progress series stay after the move: %v", err)
		}
	})

	// Last, as it ends this VMI: its source dying mid-flight fails the VMI (the VM, runStrategy
	// Always, starts a new one) and the migration, and the target pod goes.
	t.Run("source QEMU killed", func(t *testing.T) {
		setMigrations(t, c, `{"bandwidthPerMigration":"1Mi","progressTimeout":600,"completionTimeoutPerGiB":3000}`, `"BandwidthPerMigration":1048576`)
		source := qemuPIDs(t, c, vmi)
		if len(source) != 1 {
			t.Fatalf("QEMU processes before the migration: %v", source)
		}
		mig := migrationRunning(t, ctx, c, kubeconfig, bin, name)
		if err := syscall.Kill(source[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitMigrationFailed(t, ctx, c, mig, "its source died")
		// The old VMI failed: either it is still there, Failed, or the VM already replaced it.
		if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			now := &v1.VirtualMachineInstance{}
			if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, now); err != nil {
				return false, nil
			}
			return now.UID != vmi.UID || now.Status.Phase == v1.Failed, nil
		}); err != nil {
			t.Fatalf("VMI %s did not fail after its source QEMU died: %s", name, getVMI(t, c, name).Status.Phase)
		}
		if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			return len(launcherPods(t, c, vmi).Items) == 0, nil
		}); err != nil {
			t.Errorf("launcher pods of the failed VMI remain: %d", len(launcherPods(t, c, vmi).Items))
		}
		prom.waitFor(t, ctx, `kubevirt_vmi_migration_failed{vmi="stayer",vmim="`+mig.Name+`"} == 1`)
	})

	// Over these runs, a moving, failing and moved VM, every family qvirt documents appeared.
	prom.requireEveryDocumentedFamily(t, ctx)
}

// waitMigrationFailed waits for mig to end, and fails the test unless it failed.
func waitMigrationFailed(t *testing.T, ctx context.Context, c *localcluster.Cluster, mig *v1.VirtualMachineInstanceMigration, after string) {
	t.Helper()
	ended := &v1.VirtualMachineInstanceMigration{}
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := kv(t, c).Get(ctx, client.ObjectKeyFromObject(mig), ended)
		return err == nil && migrationEnded(ended), nil
	}); err != nil || ended.Status.Phase != v1.MigrationFailed {
		t.Fatalf("migration %s after %s: %s %v", mig.Name, after, ended.Status.Phase, err)
	}
}

// TestDrainLiveMigratesTheVM: kubectl drain of the node of a VM with evictionStrategy
// LiveMigrate completes once the VM moved: its launcher pod's eviction is refused (429) and
// turned into a migration, after which the pod ends. The VMI (same uid) runs on the other
// node with its RAM; draining that node moves it back.
func TestDrainLiveMigratesTheVM(t *testing.T) {
	c := localStack(t)
	const name = "drained"
	m := strings.Replace(vmManifest(name, "", "masquerade"), "      terminationGracePeriodSeconds:", "      evictionStrategy: LiveMigrate\n      terminationGracePeriodSeconds:", 1)
	startVM(t, c, m)
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", name, "--wait=false").Run() })
	vmi := getVMI(t, c, name)
	node := vmi.Status.NodeName
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue)
	ws := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 60*time.Second)
	markRAM(t, ws)

	// Drain its node, then the node it went to: the VM goes there and back.
	for round, from := range []string{node, ""} {
		if from == "" {
			from = getVMI(t, c, name).Status.NodeName
		}
		drain(t, ctx, c, vmi, from)
		after := getVMI(t, c, name)
		if after.UID != vmi.UID || after.Status.NodeName == from || after.Status.Phase != v1.Running {
			t.Fatalf("after drain %d VMI %s is %s on %s (was %s on %s)", round, after.UID, after.Status.Phase, after.Status.NodeName, vmi.UID, from)
		}
		if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
			return getVMI(t, c, name).Status.EvacuationNodeName == "", nil
		}); err != nil {
			t.Errorf("evacuationNodeName stays %q", getVMI(t, c, name).Status.EvacuationNodeName)
		}
		ws2 := stream(t, c, "virtualmachineinstances/"+name+"/console")
		send(t, ws2, "\n")
		requireMarker(t, ws2)
		if out, err := c.K8s.Kubectl("uncordon", from).CombinedOutput(); err != nil {
			t.Fatalf("kubectl uncordon %s: %v: %s", from, err, out)
		}
	}
	if back := getVMI(t, c, name).Status.NodeName; back != node {
		t.Errorf("after two drains the VM runs on %s, want %s", back, node)
	}
	var list v1.VirtualMachineInstanceMigrationList
	if err := kv(t, c).List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{"kubevirt.io/evacuation": name}); err != nil || len(list.Items) != 2 {
		t.Errorf("evacuation migrations: %d (%v), want 2", len(list.Items), err)
	}
}

// drain runs kubectl drain of node for the VMI's launcher pods and checks that an eviction was
// turned into an evacuation.
func drain(t *testing.T, ctx context.Context, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance, node string) {
	t.Helper()
	t.Cleanup(func() { _ = c.K8s.Kubectl("uncordon", node).Run() })
	out, err := c.K8s.Kubectl("drain", node, "--pod-selector=kubevirt.io/created-by="+string(vmi.UID),
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
	}
	if !strings.Contains(string(out), "Eviction triggered evacuation of VMI default/"+vmi.Name) {
		t.Errorf("kubectl drain of %s did not show the evacuation:\n%s", node, out)
	}
}
