package handler

import (
	"testing"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

func TestLauncherExitsBecomeVMIPhases(t *testing.T) {
	for _, tc := range []struct {
		state  launcherapi.State
		reason launcherapi.ExitReason
		want   v1.VirtualMachineInstancePhase
	}{
		{launcherapi.State_STATE_RUNNING, launcherapi.ExitReason_EXIT_REASON_UNSPECIFIED, v1.Running},
		{launcherapi.State_STATE_STOPPED, launcherapi.ExitReason_EXIT_REASON_GUEST_SHUTDOWN, v1.Succeeded},
		{launcherapi.State_STATE_CRASHED, launcherapi.ExitReason_EXIT_REASON_CRASHED, v1.Failed},
		// A source whose guest moved to the migration's target leaves the VMI running.
		{launcherapi.State_STATE_STOPPED, launcherapi.ExitReason_EXIT_REASON_MIGRATED, v1.Running},
	} {
		vmi := &v1.VirtualMachineInstance{}
		vmi.Status.Phase = v1.Running
		applyLauncherStatus(vmi, &launcherapi.StatusResponse{State: tc.state, ExitReason: tc.reason}, nil)
		if vmi.Status.Phase != tc.want {
			t.Errorf("%s/%s: phase %s, want %s", tc.state, tc.reason, vmi.Status.Phase, tc.want)
		}
	}
}

// TestSourceQuittingAfterAMigrationIsNoShutdown: while a source launcher quits its QEMU after
// the guest moved, the VMI's status is left to the target, not marked shutting down.
func TestSourceQuittingAfterAMigrationIsNoShutdown(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Status.Phase = v1.Running
	setCondition(vmi, v1.VirtualMachineInstanceReady, true, "", "")
	ls := &launcherapi.StatusResponse{State: launcherapi.State_STATE_SHUTTING_DOWN,
		Migration: &launcherapi.MigrationStatus{Outgoing: true, State: "completed"}}
	applyLauncherStatus(vmi, ls, nil)
	if c := vmi.Status.Conditions[0]; vmi.Status.Phase != v1.Running || c.Status != "True" || c.Reason != "" {
		t.Errorf("phase %s, Ready %s %q: want the status untouched", vmi.Status.Phase, c.Status, c.Reason)
	}
	// A migration that failed leaves the source in charge: its shutdown shows.
	ls.Migration.State = "failed"
	applyLauncherStatus(vmi, ls, nil)
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c.Reason != "ShuttingDown" {
		t.Errorf("Ready reason %q after a failed migration, want ShuttingDown", c.Reason)
	}
}

func condition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}
