package vm

import (
	corev1 "k8s.io/api/core/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// Expectation is what this round of the controller just did to the VMI, which
// the cache may not show yet.
type Expectation struct {
	// StartExpected: a VMI was just created (or found to exist already).
	StartExpected bool
	// StopExpected: the VMI was just deleted.
	StopExpected bool
}

// PrintableStatus is the kubectl STATUS of a VM. Several states can hold at
// once (Running and Migrating, Paused and Terminating); as in KubeVirt the
// first in this order wins: Terminating, Stopping, Migrating, Paused, Running,
// ErrorUnschedulable, ErrImagePull, ImagePullBackOff, Starting,
// CrashLoopBackOff, Stopped, else Unknown.
func PrintableStatus(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, exp Expectation) virtv1.VirtualMachinePrintableStatus {
	checks := []struct {
		status virtv1.VirtualMachinePrintableStatus
		holds  func() bool
	}{
		{virtv1.VirtualMachineStatusTerminating, func() bool { return vm.DeletionTimestamp != nil }},
		{virtv1.VirtualMachineStatusStopping, func() bool {
			return vmi != nil && !vmiutil.IsFinal(vmi) && (vmi.DeletionTimestamp != nil || exp.StopExpected)
		}},
		{virtv1.VirtualMachineStatusMigrating, func() bool { return vmi != nil && vmiutil.IsMigrating(vmi) }},
		{virtv1.VirtualMachineStatusPaused, func() bool { return vmi != nil && vmiutil.IsRunning(vmi) && paused(vmi) }},
		{virtv1.VirtualMachineStatusRunning, func() bool { return vmi != nil && vmiutil.IsRunning(vmi) && !paused(vmi) }},
		{virtv1.VirtualMachineStatusUnschedulable, func() bool {
			c := vmiCond(vmi, virtv1.VirtualMachineInstancePodScheduled)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}},
		{virtv1.VirtualMachineStatusErrImagePull, func() bool { return syncReason(vmi) == "ErrImagePull" }},
		{virtv1.VirtualMachineStatusImagePullBackOff, func() bool { return syncReason(vmi) == "ImagePullBackOff" }},
		{virtv1.VirtualMachineStatusStarting, func() bool {
			if vmi == nil {
				return exp.StartExpected
			}
			p := vmi.Status.Phase
			return vmiutil.IsUnprocessed(vmi) || p == virtv1.Scheduling || p == virtv1.Scheduled
		}},
		{virtv1.VirtualMachineStatusCrashLoopBackOff, func() bool {
			if (vmi != nil && !vmiutil.IsFinal(vmi)) || exp.StartExpected {
				return false
			}
			s, err := vm.RunStrategy()
			auto := err == nil && (s == virtv1.RunStrategyAlways || s == virtv1.RunStrategyRerunOnFailure || s == virtv1.RunStrategyOnce)
			sf := vm.Status.StartFailure
			return auto && sf != nil && sf.ConsecutiveFailCount > 0
		}},
		{virtv1.VirtualMachineStatusStopped, func() bool {
			if vmi != nil {
				return vmiutil.IsFinal(vmi)
			}
			return !exp.StartExpected
		}},
	}
	for _, c := range checks {
		if c.holds() {
			return c.status
		}
	}
	return virtv1.VirtualMachineStatusUnknown
}

func paused(vmi *virtv1.VirtualMachineInstance) bool {
	return vmiutil.HasCondition(vmi, virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue)
}

func vmiCond(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	if vmi == nil {
		return nil
	}
	return vmiutil.Condition(vmi, t)
}

// syncReason is the reason of a failing Synchronized condition, where the VMI
// controller reports image pull errors of the launcher pod.
func syncReason(vmi *virtv1.VirtualMachineInstance) string {
	c := vmiCond(vmi, vmiutil.SynchronizedCondition)
	if c == nil || c.Status != corev1.ConditionFalse {
		return ""
	}
	return c.Reason
}
