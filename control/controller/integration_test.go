package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

func newVM(ns, name string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{Memory: &virtv1.Memory{Guest: ptr.To(resource.MustParse("64Mi"))}},
				},
			},
		},
	}
}

// forTest returns e bound to a subtest, so that its helpers fail that subtest.
func (e *env) forTest(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// running waits until the VM reports Running with a Running VMI whose single
// launcher pod was bound by the scheduler, and returns the VMI.
func (e *env) running(ns, name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	var vmi *virtv1.VirtualMachineInstance
	e.eventually(time.Minute, func() (bool, string) {
		vm := e.getVM(ns, name)
		vmi = e.getVMI(ns, name)
		switch {
		case vm == nil || vmi == nil:
			return false, "no VM or VMI"
		case vm.Status.PrintableStatus != virtv1.VirtualMachineStatusRunning || !vm.Status.Ready || !vm.Status.Created:
			return false, fmt.Sprintf("VM status %s ready %v", vm.Status.PrintableStatus, vm.Status.Ready)
		case vmi.Status.Phase != virtv1.Running:
			return false, fmt.Sprintf("VMI phase %q", vmi.Status.Phase)
		}
		return true, ""
	})
	var mine []corev1.Pod
	for _, p := range e.pods(ns) {
		if p.Labels[virtv1.CreatedByLabel] == string(vmi.UID) {
			mine = append(mine, p)
		}
	}
	if len(mine) != 1 {
		e.t.Fatalf("VMI %s has %d launcher pods", name, len(mine))
	}
	pod := mine[0]
	if pod.Name != launcherpod.PodName(vmi.Name, vmi.UID) || !metav1.IsControlledBy(&pod, vmi) {
		e.t.Errorf("pod %s, owners %+v", pod.Name, pod.OwnerReferences)
	}
	if pod.Spec.NodeName == "" || vmi.Status.NodeName != pod.Spec.NodeName || vmi.Labels[virtv1.NodeNameLabel] != pod.Spec.NodeName {
		e.t.Errorf("pod on %q, VMI nodeName %q label %q", pod.Spec.NodeName, vmi.Status.NodeName, vmi.Labels[virtv1.NodeNameLabel])
	}
	if vmi.Status.ActivePods[pod.UID] != pod.Spec.NodeName || vmi.Status.QOSClass == nil {
		e.t.Errorf("activePods %v qosClass %v", vmi.Status.ActivePods, vmi.Status.QOSClass)
	}
	return vmi
}

// stopped waits until the VM reports Stopped with no VMI and no pods left.
func (e *env) stopped(ns, name string) {
	e.t.Helper()
	e.eventually(time.Minute, func() (bool, string) {
		vm := e.getVM(ns, name)
		if vm == nil || vm.Status.PrintableStatus != virtv1.VirtualMachineStatusStopped || vm.Status.Created {
			return false, fmt.Sprintf("VM %+v", vm)
		}
		if vmi := e.getVMI(ns, name); vmi != nil {
			return false, fmt.Sprintf("VMI in phase %q still there", vmi.Status.Phase)
		}
		if n := len(e.pods(ns)); n != 0 {
			return false, fmt.Sprintf("%d pods left", n)
		}
		return true, ""
	})
}

func TestAgainstKubernetes(t *testing.T) {
	e := startEnv(t, "node-1", "node-2")
	m := e.startManager()
	ctx := context.Background()

	t.Run("HaltedAlwaysHalted", func(t *testing.T) {
		e := e.forTest(t)
		ns := "halted"
		e.namespace(ctx, ns)
		e.create(newVM(ns, "vm", virtv1.RunStrategyHalted))
		e.eventually(30*time.Second, func() (bool, string) {
			vm := e.getVM(ns, "vm")
			return vm != nil && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped, fmt.Sprintf("%+v", vm)
		})
		if e.getVMI(ns, "vm") != nil {
			t.Fatal("a halted VM got a VMI")
		}

		began := time.Now()
		e.patchVM(ns, "vm", func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways) })
		first := e.running(ns, "vm")
		t.Logf("Halted -> Always: VM Running after %s", time.Since(began).Round(time.Millisecond))
		if !metav1.IsControlledBy(first, e.getVM(ns, "vm")) || first.Labels["app"] != "vm" {
			t.Errorf("VMI owners %+v labels %v", first.OwnerReferences, first.Labels)
		}

		// The guest powers off: Always starts a new VMI.
		e.patchVMIStatus(ns, "vm", func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Succeeded })
		e.eventually(time.Minute, func() (bool, string) {
			v := e.getVMI(ns, "vm")
			return v != nil && v.UID != first.UID && v.Status.Phase == virtv1.Running, fmt.Sprintf("VMI %v", v != nil)
		})
		e.running(ns, "vm")

		began = time.Now()
		e.patchVM(ns, "vm", func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted) })
		e.stopped(ns, "vm")
		t.Logf("Always -> Halted: VMI and pod gone after %s", time.Since(began).Round(time.Millisecond))
	})

	t.Run("ManualRequests", func(t *testing.T) {
		e := e.forTest(t)
		ns := "manual"
		e.namespace(ctx, ns)
		e.create(newVM(ns, "vm", virtv1.RunStrategyManual))
		time.Sleep(time.Second)
		e.stopped(ns, "vm")

		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
		})
		vmi := e.running(ns, "vm")
		e.eventually(10*time.Second, func() (bool, string) {
			r := e.getVM(ns, "vm").Status.StateChangeRequests
			return len(r) == 0, fmt.Sprintf("requests %+v", r)
		})

		// Restart: stop this VMI, then start another.
		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests,
				virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To(vmi.UID)},
				virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
		})
		e.eventually(time.Minute, func() (bool, string) {
			v := e.getVMI(ns, "vm")
			return v != nil && v.UID != vmi.UID && v.Status.Phase == virtv1.Running, "waiting for the restarted VMI"
		})
		vmi = e.running(ns, "vm")

		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To(vmi.UID)})
		})
		e.stopped(ns, "vm")
		e.eventually(10*time.Second, func() (bool, string) {
			r := e.getVM(ns, "vm").Status.StateChangeRequests
			return len(r) == 0, fmt.Sprintf("requests %+v", r)
		})
	})

	t.Run("RerunOnFailure", func(t *testing.T) {
		e := e.forTest(t)
		ns := "rerun"
		e.namespace(ctx, ns)
		e.create(newVM(ns, "vm", virtv1.RunStrategyRerunOnFailure))
		first := e.running(ns, "vm")

		// The guest crashes; the node agent reports it.
		e.patchVMIStatus(ns, "vm", func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Failed })
		e.eventually(time.Minute, func() (bool, string) {
			v := e.getVMI(ns, "vm")
			return v != nil && v.UID != first.UID && v.Status.Phase == virtv1.Running, "waiting for the replacement VMI"
		})
		e.running(ns, "vm")
		for _, p := range e.pods(ns) {
			if p.Labels[virtv1.CreatedByLabel] == string(first.UID) {
				t.Errorf("pod %s of the failed VMI is still there", p.Name)
			}
		}
	})

	t.Run("Unschedulable", func(t *testing.T) {
		e := e.forTest(t)
		ns := "unschedulable"
		e.namespace(ctx, ns)
		vm := newVM(ns, "vm", virtv1.RunStrategyAlways)
		vm.Spec.Template.Spec.NodeSelector = map[string]string{"gpu": "none-here"}
		e.create(vm)
		e.eventually(time.Minute, func() (bool, string) {
			vm := e.getVM(ns, "vm")
			return vm != nil && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusUnschedulable, fmt.Sprintf("status %v", vm.Status.PrintableStatus)
		})
		if err := e.c.Delete(ctx, vm); err != nil {
			t.Fatal(err)
		}
		e.eventually(time.Minute, func() (bool, string) {
			return e.getVM(ns, "vm") == nil && e.getVMI(ns, "vm") == nil && len(e.pods(ns)) == 0, "VM, VMI or pod left"
		})
	})

	t.Run("DeleteVM", func(t *testing.T) {
		e := e.forTest(t)
		ns := "delete"
		e.namespace(ctx, ns)
		policies := map[string]metav1.DeletionPropagation{"background": metav1.DeletePropagationBackground, "foreground": metav1.DeletePropagationForeground}
		for name := range policies {
			e.create(newVM(ns, name, virtv1.RunStrategyAlways))
		}
		for name, policy := range policies {
			e.running(ns, name)
			if err := e.c.Delete(ctx, e.getVM(ns, name), client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
		}
		e.eventually(time.Minute, func() (bool, string) {
			for name := range policies {
				if e.getVM(ns, name) != nil || e.getVMI(ns, name) != nil {
					return false, name + " VM or VMI left"
				}
			}
			return len(e.pods(ns)) == 0, "pods left"
		})
	})

	t.Run("Migration", func(t *testing.T) {
		e := e.forTest(t)
		ns := "migration"
		e.namespace(ctx, ns)
		e.create(newVM(ns, "vm", virtv1.RunStrategyAlways))
		vmi := e.running(ns, "vm")
		source := vmi.Status.NodeName

		mig := &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Name: "move", Namespace: ns},
			Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm", AddedNodeSelector: map[string]string{corev1.LabelOSStable: "linux"}},
		}
		e.create(mig)
		var target corev1.Pod
		e.eventually(time.Minute, func() (bool, string) {
			got := &virtv1.VirtualMachineInstanceMigration{}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(mig), got); err != nil {
				return false, err.Error()
			}
			mig = got
			st := got.Status.MigrationState
			// Scheduled, then handed to the node agents (none run here).
			if got.Status.Phase != virtv1.MigrationPreparingTarget || st == nil {
				return false, fmt.Sprintf("phase %q", got.Status.Phase)
			}
			for _, p := range e.pods(ns) {
				if p.Name == st.TargetPod {
					target = p
				}
			}
			return target.Name != "", "target pod " + st.TargetPod + " not found"
		})
		st := mig.Status.MigrationState
		if st.SourceNode != source || st.TargetNode == source || target.Spec.NodeName != st.TargetNode {
			t.Errorf("source %s, state %+v, target pod on %s", source, st, target.Spec.NodeName)
		}
		if target.Labels[virtv1.MigrationJobLabel] != string(mig.UID) {
			t.Errorf("target pod labels %v", target.Labels)
		}
		t.Logf("migration PreparingTarget: %s -> %s", st.SourceNode, st.TargetNode)
		if v := e.getVMI(ns, "vm"); v.Status.Phase != virtv1.Running || len(v.Status.ActivePods) != 2 {
			t.Errorf("VMI phase %q activePods %v during the migration", v.Status.Phase, v.Status.ActivePods)
		} else if vs := v.Status.MigrationState; vs == nil || vs.MigrationUID != mig.UID || vs.TargetPod != target.Name || vs.SourceNode != source {
			t.Errorf("the VMI's migrationState %+v does not name the migration", vs)
		}

		// Cancel: the target pod goes, the source keeps running.
		if err := e.c.Delete(ctx, mig); err != nil {
			t.Fatal(err)
		}
		e.eventually(time.Minute, func() (bool, string) {
			for _, p := range e.pods(ns) {
				if p.Name == target.Name {
					return false, "target pod still there"
				}
			}
			err := e.c.Get(ctx, client.ObjectKeyFromObject(mig), &virtv1.VirtualMachineInstanceMigration{})
			return err != nil, "migration still there"
		})
		e.running(ns, "vm")
		// The node agents are told to stop moving it.
		if vs := e.getVMI(ns, "vm").Status.MigrationState; vs == nil || !vs.Failed || !strings.Contains(vs.FailureReason, "cancelled") || vs.EndTimestamp == nil {
			t.Errorf("the VMI's migrationState after the cancel: %+v", vs)
		}
	})

	t.Run("Hotplug", func(t *testing.T) {
		e := e.forTest(t)
		ns := "hotplug"
		e.namespace(ctx, ns)
		e.create(newVM(ns, "vm", virtv1.RunStrategyAlways))
		first := e.running(ns, "vm")

		// virt-api's addvolume; the claim does not exist, so its attachment pod waits.
		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.VolumeRequests = append(vm.Status.VolumeRequests, virtv1.VirtualMachineVolumeRequest{AddVolumeOptions: &virtv1.AddVolumeOptions{
				Name: "data", Disk: &virtv1.Disk{DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}},
				VolumeSource: &virtv1.HotplugVolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-pvc"}}}}})
		})
		hasVolume := func(spec virtv1.VirtualMachineInstanceSpec, name string, memoryDump bool) bool {
			for _, v := range spec.Volumes {
				if v.Name == name {
					return (v.MemoryDump != nil) == memoryDump && v.IsHotplugged()
				}
			}
			return false
		}
		// current waits until the VM is current with its template: no restart needed.
		current := func(why string) {
			e.eventually(30*time.Second, func() (bool, string) {
				vm := e.getVM(ns, "vm")
				for _, c := range vm.Status.Conditions {
					if c.Type == virtv1.VirtualMachineRestartRequired {
						return false, why + ": restart required"
					}
				}
				return vm.Status.ObservedGeneration == vm.Generation && vm.Status.DesiredGeneration == vm.Generation,
					fmt.Sprintf("%s: generation %d, observed %d, desired %d", why, vm.Generation, vm.Status.ObservedGeneration, vm.Status.DesiredGeneration)
			})
		}
		e.eventually(30*time.Second, func() (bool, string) {
			vm, vmi := e.getVM(ns, "vm"), e.getVMI(ns, "vm")
			return hasVolume(vm.Spec.Template.Spec, "data", false) && hasVolume(vmi.Spec, "data", false) && len(vm.Status.VolumeRequests) == 0,
				fmt.Sprintf("requests %+v", vm.Status.VolumeRequests)
		})
		current("after addvolume")

		// virt-api's memorydump, then virt-handler's report of the dump.
		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.MemoryDumpRequest = &virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump-pvc", Phase: virtv1.MemoryDumpAssociating}
		})
		dumpPhase := func(want virtv1.MemoryDumpPhase, also func(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool) {
			e.eventually(30*time.Second, func() (bool, string) {
				vm, vmi := e.getVM(ns, "vm"), e.getVMI(ns, "vm")
				d := vm.Status.MemoryDumpRequest
				return d != nil && d.Phase == want && also(vm, vmi), fmt.Sprintf("want %s, request %+v", want, d)
			})
		}
		dumpPhase(virtv1.MemoryDumpInProgress, func(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
			return hasVolume(vm.Spec.Template.Spec, "dump-pvc", true) && hasVolume(vmi.Spec, "dump-pvc", true)
		})
		end := metav1.Now()
		e.patchVMIStatus(ns, "vm", func(v *virtv1.VirtualMachineInstance) {
			for i := range v.Status.VolumeStatus {
				if vs := &v.Status.VolumeStatus[i]; vs.Name == "dump-pvc" {
					vs.Phase = virtv1.MemoryDumpVolumeCompleted
					vs.MemoryDumpVolume = &virtv1.DomainMemoryDumpInfo{ClaimName: "dump-pvc", StartTimestamp: &end, EndTimestamp: &end, TargetFileName: "vm.memory.dump"}
				}
			}
		})
		// Unmounted from the VMI, whose controller then drops the volume's status: Completed.
		dumpPhase(virtv1.MemoryDumpCompleted, func(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
			d := vm.Status.MemoryDumpRequest
			return d.FileName != nil && *d.FileName == "vm.memory.dump" && !hasVolume(vmi.Spec, "dump-pvc", true) && hasVolume(vm.Spec.Template.Spec, "dump-pvc", true)
		})
		current("after memorydump")

		e.patchVMStatus(ns, "vm", func(vm *virtv1.VirtualMachine) {
			vm.Status.MemoryDumpRequest = &virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump-pvc", Phase: virtv1.MemoryDumpDissociating, Remove: true}
			vm.Status.VolumeRequests = []virtv1.VirtualMachineVolumeRequest{{RemoveVolumeOptions: &virtv1.RemoveVolumeOptions{Name: "data"}}}
		})
		e.eventually(30*time.Second, func() (bool, string) {
			vm, vmi := e.getVM(ns, "vm"), e.getVMI(ns, "vm")
			return vm.Status.MemoryDumpRequest == nil && len(vm.Status.VolumeRequests) == 0 && len(vm.Spec.Template.Spec.Volumes) == 0 && len(vmi.Spec.Volumes) == 0,
				fmt.Sprintf("request %+v, template volumes %+v, VMI volumes %+v", vm.Status.MemoryDumpRequest, vm.Spec.Template.Spec.Volumes, vmi.Spec.Volumes)
		})
		current("after removevolume and removememorydump")
		if vmi := e.getVMI(ns, "vm"); vmi.UID != first.UID {
			t.Error("hotplug replaced the VMI")
		}
	})

	t.Run("MetricsProbesLease", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body, err := m.get("http://" + m.healthAddr + path)
			if err != nil || code != 200 {
				t.Errorf("%s: %d %q %v", path, code, body, err)
			}
		}
		// /metrics is served over TLS only.
		if code, _, err := m.get("http://" + m.metricsAddr + "/metrics"); err == nil && code == 200 {
			t.Error("/metrics answered plain HTTP")
		}
		_, body, err := m.get("https://" + m.metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, phase := range []string{"Scheduling", "Scheduled", "Running", "Failed"} {
			want := fmt.Sprintf(`kubevirt_vmi_phase_transition_time_from_creation_seconds_count{phase=%q}`, phase)
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		lease := &coordinationv1.Lease{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "kubevirt", Name: controller.LeaseName}, lease); err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			t.Errorf("lease %+v: %v", lease.Spec, err)
		}
	})

	t.Run("RestartDuringBurst", func(t *testing.T) {
		e := e.forTest(t)
		const n = 50
		ns := "burst"
		e.namespace(ctx, ns)

		began := time.Now()
		var wg sync.WaitGroup
		names := make(chan string, n)
		for i := range n {
			names <- fmt.Sprintf("vm-%02d", i)
		}
		close(names)
		errs := make(chan error, n)
		for range 8 {
			wg.Go(func() {
				for name := range names {
					if err := e.c.Create(ctx, newVM(ns, name, virtv1.RunStrategyAlways)); err != nil {
						errs <- err
					}
				}
			})
		}

		// Kill the controller once part of the burst has VMIs and pods.
		e.eventually(time.Minute, func() (bool, string) {
			var l virtv1.VirtualMachineInstanceList
			if err := e.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			return len(l.Items) >= n/4, fmt.Sprintf("%d VMIs", len(l.Items))
		})
		m.stop(t)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var vmis virtv1.VirtualMachineInstanceList
		if err := e.c.List(ctx, &vmis, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		t.Logf("controller stopped after %s with %d VMIs and %d pods for %d VMs",
			time.Since(began).Round(time.Millisecond), len(vmis.Items), len(e.pods(ns)), n)

		restarted := time.Now()
		e.startManager()
		e.eventually(3*time.Minute, func() (bool, string) {
			var vms virtv1.VirtualMachineList
			if err := e.c.List(ctx, &vms, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			running := 0
			for _, vm := range vms.Items {
				if vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning {
					running++
				}
			}
			return running == n, fmt.Sprintf("%d of %d VMs running", running, n)
		})
		t.Logf("all %d VMs Running %s after the restart, %s after the first create",
			n, time.Since(restarted).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

		if err := e.c.List(ctx, &vmis, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		uids := map[types.UID]bool{}
		for _, v := range vmis.Items {
			uids[v.UID] = true
		}
		perVMI := map[string]int{}
		pods := e.pods(ns)
		for _, p := range pods {
			perVMI[p.Labels[virtv1.CreatedByLabel]]++
			if !uids[types.UID(p.Labels[virtv1.CreatedByLabel])] {
				t.Errorf("pod %s belongs to no VMI", p.Name)
			}
		}
		if len(vmis.Items) != n || len(pods) != n {
			t.Errorf("%d VMIs and %d pods for %d VMs", len(vmis.Items), len(pods), n)
		}
		for uid := range uids {
			if perVMI[string(uid)] != 1 {
				t.Errorf("VMI %s has %d launcher pods", uid, perVMI[string(uid)])
			}
		}
	})
}
