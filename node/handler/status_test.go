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
