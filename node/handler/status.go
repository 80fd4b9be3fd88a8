package handler

import (
	"context"
	"net"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// writeStatus reports the launcher's view on the VMI, writing only when something changed.
func (h *Handler) writeStatus(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState) error {
	next := vmi.DeepCopy()
	ls := st.lastStatus()
	st.mu.Lock()
	nics := st.nics
	st.mu.Unlock()
	applyLauncherStatus(next, ls, nics)
	if reflect.DeepEqual(stripTimes(vmi.Status), stripTimes(next.Status)) {
		return nil
	}
	if next.Status.Phase != vmi.Status.Phase {
		h.log.Info("VMI phase", "vmi", st.key.String(), "from", vmi.Status.Phase, "to", next.Status.Phase, "reason", next.Status.Reason)
	}
	return h.client.Status().Update(ctx, next)
}

// applyLauncherStatus is the pure mapping from the launcher's state to the VMI's status.
func applyLauncherStatus(vmi *v1.VirtualMachineInstance, ls *launcherapi.StatusResponse, nics map[string]*PlumbedNIC) {
	if ls == nil || isFinal(vmi) {
		return
	}
	if movedAway(ls) {
		// The guest runs on the migration's target: its node's agent reports it now.
		return
	}
	switch ls.State {
	case launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED, launcherapi.State_STATE_SHUTTING_DOWN:
		setPhase(vmi, v1.Running)
		paused := ls.State == launcherapi.State_STATE_PAUSED
		setCondition(vmi, v1.VirtualMachineInstancePaused, paused, pick(paused, "PausedByUser", ""), pick(paused, "VMI was paused by user", ""))
		if paused {
			setCondition(vmi, v1.VirtualMachineInstanceReady, false, "Paused", "the VM is paused")
		} else {
			setCondition(vmi, v1.VirtualMachineInstanceReady, ls.State == launcherapi.State_STATE_RUNNING, pick(ls.State == launcherapi.State_STATE_SHUTTING_DOWN, "ShuttingDown", ""), "")
		}
		migratable, reason, msg := liveMigratable(vmi)
		setCondition(vmi, v1.VirtualMachineInstanceIsMigratable, migratable, reason, msg)
		vmi.Status.Interfaces = interfaces(vmi, nics)
		applyGuestAgent(vmi, ls.GetGuestAgent())
		applyAccessCredentials(vmi, ls.GetAccessCredentials())
		applyHotplugStatus(vmi, ls)
	case launcherapi.State_STATE_STOPPED:
		setPhase(vmi, v1.Succeeded)
		vmi.Status.Reason = ls.ExitReason.String()
		setCondition(vmi, v1.VirtualMachineInstanceReady, false, "Stopped", ls.Message)
	case launcherapi.State_STATE_CRASHED:
		setPhase(vmi, v1.Failed)
		vmi.Status.Reason = ls.ExitReason.String()
		setCondition(vmi, v1.VirtualMachineInstanceReady, false, "Crashed", ls.Message)
	}
}

// movedAway reports a source launcher whose guest went to a migration's target: it quits (or
// has quit) its QEMU, which is no stop of the VM.
func movedAway(ls *launcherapi.StatusResponse) bool {
	if ls.ExitReason == launcherapi.ExitReason_EXIT_REASON_MIGRATED {
		return true
	}
	m := ls.GetMigration()
	return m != nil && m.Outgoing && m.State == qmp.MigrationCompleted
}

func pick(c bool, yes, no string) string {
	if c {
		return yes
	}
	return no
}

// interfaces reports each interface with the address the network sees, as KubeVirt does
// without a guest agent.
func interfaces(vmi *v1.VirtualMachineInstance, nics map[string]*PlumbedNIC) []v1.VirtualMachineInstanceNetworkInterface {
	var out []v1.VirtualMachineInstanceNetworkInterface
	for _, in := range vmi.Spec.Domain.Devices.Interfaces {
		nic := nics[in.Name]
		if nic == nil {
			continue
		}
		s := v1.VirtualMachineInstanceNetworkInterface{Name: in.Name, MAC: nic.MAC, IPs: nic.IPs, InterfaceName: "eth0",
			PodInterfaceName: nic.PodInterfaceName, InfoSource: "domain"}
		if len(nic.IPs) > 0 {
			s.IP = nic.IPs[0]
		}
		if hw, err := net.ParseMAC(s.MAC); err == nil {
			s.MAC = hw.String()
		}
		out = append(out, s)
	}
	return out
}

func setPhase(vmi *v1.VirtualMachineInstance, p v1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == p {
		return
	}
	vmi.Status.Phase = p
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.Now()})
}

// setCondition sets a condition, keeping its transition time when the status does not change.
func setCondition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType, on bool, reason, msg string) {
	s := corev1.ConditionFalse
	if on {
		s = corev1.ConditionTrue
	}
	for i := range vmi.Status.Conditions {
		c := &vmi.Status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != s {
			c.LastTransitionTime = metav1.Now()
		}
		c.Status, c.Reason, c.Message = s, reason, msg
		return
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, v1.VirtualMachineInstanceCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()})
}

// stripTimes drops timestamps so that a status is only written when its content changed.
func stripTimes(s v1.VirtualMachineInstanceStatus) v1.VirtualMachineInstanceStatus {
	c := *s.DeepCopy()
	for i := range c.Conditions {
		c.Conditions[i].LastTransitionTime = metav1.Time{}
		c.Conditions[i].LastProbeTime = metav1.Time{}
	}
	c.PhaseTransitionTimestamps = nil
	return c
}
