package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func migrationNamed(name, vmi string, phase virtv1.VirtualMachineInstanceMigrationPhase) *virtv1.VirtualMachineInstanceMigration {
	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	m.Spec.VMIName, m.Status.Phase = vmi, phase
	return m
}

func TestMigrationCollector(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := virtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	start, end := metav1.Unix(1000, 0), metav1.Unix(1007, 0)
	done := migrationNamed("m-1", "a", virtv1.MigrationSucceeded)
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}}
	vmi.Status.NodeName = "node-2"
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: done.UID, StartTimestamp: &start, EndTimestamp: &end, Completed: true}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi, done,
		migrationNamed("m-2", "b", virtv1.MigrationFailed), migrationNamed("m-3", "c", virtv1.MigrationPending),
		migrationNamed("m-4", "d", virtv1.MigrationTargetReady), migrationNamed("m-5", "e", virtv1.MigrationRunning),
		migrationNamed("m-6", "f", virtv1.MigrationPhaseUnset)).Build()

	leading := false
	col := &MigrationCollector{}
	col.Use(c, func() bool { return leading }, logr.Discard())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("a standby replica reports %d series (%v)", n, err)
	}
	leading = true
	want := `
# HELP kubevirt_vmi_migration_end_time_seconds The time at which the migration ended.
# TYPE kubevirt_vmi_migration_end_time_seconds gauge
kubevirt_vmi_migration_end_time_seconds{migration_name="m-1",name="a",namespace="default",node="node-2",status="succeeded"} 1007
# HELP kubevirt_vmi_migration_failed Indicates if the VMI migration failed.
# TYPE kubevirt_vmi_migration_failed gauge
kubevirt_vmi_migration_failed{namespace="default",vmi="b",vmim="m-2"} 1
# HELP kubevirt_vmi_migration_start_time_seconds The time at which the migration started.
# TYPE kubevirt_vmi_migration_start_time_seconds gauge
kubevirt_vmi_migration_start_time_seconds{migration_name="m-1",name="a",namespace="default",node="node-2"} 1000
# HELP kubevirt_vmi_migration_succeeded Indicates if the VMI migration succeeded.
# TYPE kubevirt_vmi_migration_succeeded gauge
kubevirt_vmi_migration_succeeded{namespace="default",vmi="a",vmim="m-1"} 1
# HELP kubevirt_vmi_migrations_in_pending_phase Number of current pending migrations.
# TYPE kubevirt_vmi_migrations_in_pending_phase gauge
kubevirt_vmi_migrations_in_pending_phase 1
# HELP kubevirt_vmi_migrations_in_running_phase Number of current running migrations.
# TYPE kubevirt_vmi_migrations_in_running_phase gauge
kubevirt_vmi_migrations_in_running_phase 2
# HELP kubevirt_vmi_migrations_in_scheduling_phase Number of current scheduling migrations.
# TYPE kubevirt_vmi_migrations_in_scheduling_phase gauge
kubevirt_vmi_migrations_in_scheduling_phase 0
# HELP kubevirt_vmi_migrations_in_unset_phase Number of current unset migrations. These are pending items the virt-controller hasn't processed yet from the queue.
# TYPE kubevirt_vmi_migrations_in_unset_phase gauge
kubevirt_vmi_migrations_in_unset_phase 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubevirt_vmi_migration_end_time_seconds", "kubevirt_vmi_migration_failed",
		"kubevirt_vmi_migration_start_time_seconds", "kubevirt_vmi_migration_succeeded", "kubevirt_vmi_migrations_in_pending_phase",
		"kubevirt_vmi_migrations_in_running_phase", "kubevirt_vmi_migrations_in_scheduling_phase", "kubevirt_vmi_migrations_in_unset_phase"); err != nil {
		t.Error(err)
	}
}

func TestObserveMigrationPhase(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(5000, 0)
	mig := migrationNamed("m-1", "a", virtv1.MigrationSucceeded)
	mig.CreationTimestamp = metav1.NewTime(created)
	mig.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{
		{Phase: virtv1.MigrationSucceeded, PhaseTransitionTimestamp: metav1.NewTime(created.Add(4 * time.Second))}}
	m.ObserveMigrationPhase(mig, created.Add(time.Hour))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != MigrationPhaseTransitionFromCreationName {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if mf.GetMetric()[0].GetLabel()[0].GetValue() != "Succeeded" || h.GetSampleCount() != 1 || h.GetSampleSum() != 4 {
			t.Errorf("histogram %v", mf)
		}
		return
	}
	t.Errorf("no %s gathered", MigrationPhaseTransitionFromCreationName)
}
