package webhooks

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestValidateMigrationTarget(t *testing.T) {
	mig := &v1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m2", Namespace: "ns"}, Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "vm1"}}
	vmi := func(phase v1.VirtualMachineInstancePhase, migratable corev1.ConditionStatus) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns"}, Status: v1.VirtualMachineInstanceStatus{Phase: phase}}
		if migratable != "" {
			v.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceIsMigratable, Status: migratable,
				Reason: "InterfaceNotLiveMigratable", Message: "cannot migrate VMI which does not use masquerade to connect to the pod network"}}
		}
		return v
	}
	other := func(name string, phase v1.VirtualMachineInstanceMigrationPhase) v1.VirtualMachineInstanceMigration {
		return v1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "vm1"}, Status: v1.VirtualMachineInstanceMigrationStatus{Phase: phase}}
	}
	inFlightState := vmi(v1.Running, corev1.ConditionTrue)
	inFlightState.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "uid-1"}
	cases := []struct {
		name   string
		vmi    *v1.VirtualMachineInstance
		others []v1.VirtualMachineInstanceMigration
		want   string // "" when allowed
	}{
		{"no VMI", nil, nil, `the VMI "ns/vm1" does not exist`},
		{"finalized", vmi(v1.Succeeded, corev1.ConditionTrue), nil, "Cannot migrate VMI in finalized state."},
		{"not running", vmi(v1.Scheduling, ""), nil, `it is not running (phase "Scheduling")`},
		{"not migratable", vmi(v1.Running, corev1.ConditionFalse), nil, "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: cannot migrate VMI which does not use masquerade"},
		{"no condition yet", vmi(v1.Running, ""), nil, "has not reported whether it can migrate"},
		{"another in flight", vmi(v1.Running, corev1.ConditionTrue), []v1.VirtualMachineInstanceMigration{other("m1", v1.MigrationPending)}, "in-flight migration detected. Active migration job (m1)"},
		{"in flight per the VMI", inFlightState, nil, "Active migration job (uid-1)"},
		{"earlier ones ended", vmi(v1.Running, corev1.ConditionTrue), []v1.VirtualMachineInstanceMigration{other("m0", v1.MigrationSucceeded), other("m1", v1.MigrationFailed), other("m2", v1.MigrationPending)}, ""},
	}
	for _, tc := range cases {
		errs := ValidateMigrationTarget(mig, tc.vmi, tc.others)
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: refused: %v", tc.name, errs)
		case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || errs[0].Field != "spec.vmiName"):
			t.Errorf("%s: %v, want spec.vmiName: %s", tc.name, errs, tc.want)
		}
	}
}
