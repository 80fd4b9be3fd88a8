package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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

// TestNonEvictable: a running VMI whose eviction would be refused (LiveMigrate, from its spec or
// the KubeVirt CR, and not migratable) reports 1; one that would move or simply go reports 0.
func TestNonEvictable(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := virtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live, none := virtv1.EvictionStrategyLiveMigrate, virtv1.EvictionStrategyNone
	kv := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}}
	kv.Spec.Configuration.EvictionStrategy = &live
	running := func(name string, strategy *virtv1.EvictionStrategy, migratable bool) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		v.Spec.EvictionStrategy = strategy
		v.Status.Phase, v.Status.NodeName = virtv1.Running, "node-1"
		status := corev1.ConditionFalse
		if migratable {
			status = corev1.ConditionTrue
		}
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: status}}
		return v
	}
	pending := running("pending", &live, false)
	pending.Status.Phase = virtv1.Pending
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(kv,
		running("stuck-by-default", nil, false), running("stuck", &live, false), running("mobile", &live, true),
		running("ends", &none, false), pending).Build()
	col := &ObjectCollector{}
	col.Use(c, nil, logr.Discard())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	want := `
# HELP kubevirt_vmi_non_evictable Indication for a VirtualMachine that its eviction strategy is set to Live Migration but is not migratable.
# TYPE kubevirt_vmi_non_evictable gauge
kubevirt_vmi_non_evictable{name="ends",namespace="ns",node="node-1"} 0
kubevirt_vmi_non_evictable{name="mobile",namespace="ns",node="node-1"} 0
kubevirt_vmi_non_evictable{name="stuck",namespace="ns",node="node-1"} 1
kubevirt_vmi_non_evictable{name="stuck-by-default",namespace="ns",node="node-1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubevirt_vmi_non_evictable"); err != nil {
		t.Error(err)
	}
}

func TestComponentCollector(t *testing.T) {
	ready, leading := false, false
	col := &ComponentCollector{}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series before a manager is attached (%v)", n, err)
	}
	col.Use(func() bool { return ready }, func() bool { return leading })
	for _, tc := range []struct{ ready, leading bool }{{false, false}, {true, false}, {true, true}} {
		ready, leading = tc.ready, tc.leading
		want := fmt.Sprintf(`
# HELP kubevirt_virt_controller_leading_status Indication for an operating virt-controller.
# TYPE kubevirt_virt_controller_leading_status gauge
kubevirt_virt_controller_leading_status %v
# HELP kubevirt_virt_controller_ready_status Indication for a virt-controller that is ready to take the lead.
# TYPE kubevirt_virt_controller_ready_status gauge
kubevirt_virt_controller_ready_status %v
`, boolValue(tc.leading), boolValue(tc.ready))
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
			t.Errorf("ready %v leading %v: %v", tc.ready, tc.leading, err)
		}
	}
}

// TestObjectCollector: the VMI and VM families from the objects, with KubeVirt's "<none>" for
// what is unknown.
func TestObjectCollector(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := virtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kv := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}}
	kv.Spec.Configuration.DeveloperConfiguration = &virtv1.DeveloperConfiguration{UseEmulation: true}
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1",
		Annotations: map[string]string{"vm.kubevirt.io/os": "debian"}}}
	vmi.Status.Phase, vmi.Status.NodeName = virtv1.Running, "node-1"
	vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []virtv1.Network{{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}}
	vmi.Status.Interfaces = []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.5", IPs: []string{"10.0.0.5"}}}
	other := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "u2"}}
	other.Status.Phase, other.Status.NodeName = virtv1.Running, "node-1"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "virt-launcher-web-abcde",
		Labels: map[string]string{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue, virtv1.CreatedByLabel: "u1"}}}
	pod.Spec.NodeName = "node-1"
	vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}
	pod.Spec.Containers = []corev1.Container{{Name: "compute", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("220Mi")}}}}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", CreationTimestamp: metav1.Unix(500, 0)}}
	vm.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	vm.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(900, 0)}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(kv, vmi, other, pod, vm).Build()
	col := &ObjectCollector{}
	col.Use(c, nil, logr.Discard())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	const none = `flavor="<none>",guest_os_arch="<none>",guest_os_kernel_release="<none>",guest_os_machine="<none>",guest_os_name="<none>",guest_os_version_id="<none>",instance_type="<none>"`
	want := `
# HELP kubevirt_configuration_emulation_enabled Indicates whether the Software Emulation is enabled in the configuration.
# TYPE kubevirt_configuration_emulation_enabled gauge
kubevirt_configuration_emulation_enabled 1
# HELP kubevirt_vm_running_status_last_transition_timestamp_seconds Virtual Machine last transition timestamp to running status.
# TYPE kubevirt_vm_running_status_last_transition_timestamp_seconds counter
kubevirt_vm_running_status_last_transition_timestamp_seconds{name="web",namespace="ns",status="Running"} 900
# HELP kubevirt_vm_error_status_last_transition_timestamp_seconds Virtual Machine last transition timestamp to error status.
# TYPE kubevirt_vm_error_status_last_transition_timestamp_seconds counter
kubevirt_vm_error_status_last_transition_timestamp_seconds{name="web",namespace="ns",status="Running"} 0
# HELP kubevirt_vmi_info Information about VirtualMachineInstances.
# TYPE kubevirt_vmi_info gauge
kubevirt_vmi_info{evictable="true",` + none + `,name="db",namespace="ns",node="node-1",os="<none>",outdated="false",phase="Running",preference="<none>",vmi_pod="<none>",workload="<none>"} 1
kubevirt_vmi_info{evictable="true",` + none + `,name="web",namespace="ns",node="node-1",os="debian",outdated="false",phase="Running",preference="<none>",vmi_pod="virt-launcher-web-abcde",workload="<none>"} 1
# HELP kubevirt_vmi_launcher_memory_overhead_bytes Estimation of the memory amount required for virt-launcher's infrastructure components (e.g. libvirt, QEMU).
# TYPE kubevirt_vmi_launcher_memory_overhead_bytes gauge
kubevirt_vmi_launcher_memory_overhead_bytes{name="web",namespace="ns"} 9.6468992e+07
# HELP kubevirt_vmi_phase_count Sum of VMIs per phase and node. ` + "`phase` can be one of the following: [`Pending`, `Scheduling`, `Scheduled`, `Running`, `Succeeded`, `Failed`, `Unknown`]." + `
# TYPE kubevirt_vmi_phase_count gauge
kubevirt_vmi_phase_count{` + none + `,node="node-1",os="<none>",phase="Running",preference="<none>",workload="<none>"} 1
kubevirt_vmi_phase_count{` + none + `,node="node-1",os="debian",phase="Running",preference="<none>",workload="<none>"} 1
# HELP kubevirt_vmi_status_addresses The addresses of a VirtualMachineInstance. This metric provides the address of an available network interface associated with the VMI in the 'address' label, and about the type of address, such as internal IP, in the 'type' label.
# TYPE kubevirt_vmi_status_addresses gauge
kubevirt_vmi_status_addresses{address="10.0.0.5",name="web",namespace="ns",network_name="default",node="node-1",type="InternalIP"} 1
# HELP kubevirt_vmi_vnic_info Details of Virtual Machine Instance (VMI) vNIC interfaces.
# TYPE kubevirt_vmi_vnic_info gauge
kubevirt_vmi_vnic_info{binding_name="masquerade",binding_type="core",model="virtio",name="web",namespace="ns",network="pod networking",vnic_name="default"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubevirt_configuration_emulation_enabled",
		"kubevirt_vm_running_status_last_transition_timestamp_seconds", "kubevirt_vm_error_status_last_transition_timestamp_seconds",
		"kubevirt_vmi_info", "kubevirt_vmi_launcher_memory_overhead_bytes", "kubevirt_vmi_phase_count", "kubevirt_vmi_status_addresses", "kubevirt_vmi_vnic_info"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "kubevirt_vm_info"); err != nil || n != 1 {
		t.Errorf("kubevirt_vm_info: %d series (%v)", n, err)
	}
}
