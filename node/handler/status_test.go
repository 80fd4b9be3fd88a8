package handler

import (
	corev1 "k8s.io/api/core/v1"
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

// TestGuestAgentStatus: a connected agent sets AgentConnected, the guest OS and the guest's
// names of its NICs (a bridged NIC also its addresses, a masquerade one keeps the pod's); a
// disconnected one removes the condition.
func TestGuestAgentStatus(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}},
		{Name: "br", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}},
	}
	vmi.Status.Interfaces = []v1.VirtualMachineInstanceNetworkInterface{
		{Name: "default", MAC: "02:00:00:00:00:01", IP: "10.244.1.5", IPs: []string{"10.244.1.5"}, InfoSource: "domain"},
		{Name: "br", MAC: "02:00:00:00:00:02", InfoSource: "domain"},
	}
	ga := &launcherapi.GuestAgentInfo{Connected: true, Os: &launcherapi.GuestOSInfo{Id: "qvirt-tiny", VersionId: "1", KernelRelease: "6.1"},
		Interfaces: []*launcherapi.GuestInterface{
			{Name: "eth0", Mac: "02:00:00:00:00:01", Ips: []string{"10.0.2.2"}},
			{Name: "eth1", Mac: "02:00:00:00:00:02", Ips: []string{"192.168.7.9", "fe80::1"}},
		}}
	applyGuestAgent(vmi, ga)
	if c := conditionOf(vmi, v1.VirtualMachineInstanceAgentConnected); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("AgentConnected: %+v", c)
	}
	if vmi.Status.GuestOSInfo.ID != "qvirt-tiny" || vmi.Status.GuestOSInfo.KernelRelease != "6.1" {
		t.Errorf("guestOSInfo: %+v", vmi.Status.GuestOSInfo)
	}
	masq, br := vmi.Status.Interfaces[0], vmi.Status.Interfaces[1]
	if masq.InterfaceName != "eth0" || masq.IP != "10.244.1.5" || masq.InfoSource != "domain, guest-agent" {
		t.Errorf("masquerade NIC: %+v", masq)
	}
	if br.InterfaceName != "eth1" || br.IP != "192.168.7.9" || len(br.IPs) != 2 || br.InfoSource != "domain, guest-agent" {
		t.Errorf("bridged NIC: %+v", br)
	}
	applyGuestAgent(vmi, &launcherapi.GuestAgentInfo{})
	if c := conditionOf(vmi, v1.VirtualMachineInstanceAgentConnected); c != nil {
		t.Errorf("AgentConnected stays without the agent: %+v", c)
	}
}

func conditionOf(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}
