// Package metricsdoc_test keeps docs/metrics.md, the list of the Prometheus families qvirt
// exports, equal to what the collectors emit: it feeds each collector an input that makes every
// family appear and compares the families gathered (name, type, labels, help) with the file.
// `go test -update` (make generate) rewrites it.
package metricsdoc_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/api"
	ctrlmetrics "github.com/qvirt/qvirt/control/controller/metrics"
	"github.com/qvirt/qvirt/internal/restmetrics"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	vmimetrics "github.com/qvirt/qvirt/node/metrics"
)

var update = flag.Bool("update", false, "rewrite docs/metrics.md (make generate)")

const docPath = "../../docs/metrics.md"

type fixed []vmimetrics.VM

func (f fixed) Snapshot() []vmimetrics.VM { return f }

// handlerRegistry holds virt-handler's per-VMI collector with a VM whose every statistic is
// known, migrating away.
func handlerRegistry() *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	vm := vmimetrics.VM{Namespace: "default", Name: "vm1", Labels: map[string]string{"app": "web"},
		Stats: &launcherapi.StatsResponse{
			Cpu:   &launcherapi.CPUStats{UserNs: 3e9, SystemNs: 1e9},
			Vcpus: []*launcherapi.VCPUStats{{Id: 0, RunNs: 2e9, WaitNs: 5e8}},
			Memory: &launcherapi.MemoryStats{GuestBytes: 256 << 20, BalloonActualBytes: 256 << 20, RssBytes: 100 << 20,
				AvailableBytes: 200 << 20, UnusedBytes: 100 << 20, UsableBytes: 150 << 20, MajorFaults: 1, MinorFaults: 2,
				SwapInBytes: 4096, SwapOutBytes: 8192, CachedBytes: 30 << 20},
			Block:     []*launcherapi.BlockStats{{Drive: "rootdisk", ReadOps: 10, ReadBytes: 4096, ReadTimeNs: 2e9, FlushOps: 1}},
			DirtyRate: &launcherapi.DirtyRate{BytesPerSecond: 1 << 20},
			Migration: &launcherapi.MigrationStatus{Outgoing: true, TotalBytes: 1 << 28, TransferredBytes: 1 << 20, RemainingBytes: 1 << 27, MemoryBytesPerSecond: 1 << 20},
		},
		Interfaces:  map[string]vmimetrics.NetStats{"default": {RxBytes: 100, TxBytes: 900}},
		Filesystems: []*launcherapi.GuestFilesystem{{DiskName: "loop0", MountPoint: "/mnt/data", Type: "ext2", UsedBytes: 1 << 20, TotalBytes: 8 << 20}},
	}
	reg.MustRegister(vmimetrics.NewCollector("node01", fixed{vm}))
	return reg
}

// controllerRegistry holds virt-controller's collectors, leading, with a migration in every
// phase that has a family and a VMI that cannot be evicted.
func controllerRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := virtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := ctrlmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	created := metav1.NewTime(time.Unix(1000, 0))
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm1", CreationTimestamp: created}}
	live := virtv1.EvictionStrategyLiveMigrate
	vmi.Spec.EvictionStrategy = &live
	vmi.Status.Phase, vmi.Status.NodeName = virtv1.Running, "node01"
	vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse}}
	start, end := metav1.Unix(1100, 0), metav1.Unix(1107, 0)
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", StartTimestamp: &start, EndTimestamp: &end, Completed: true}
	m.ObservePhaseTransition(vmi, created.Add(5*time.Second))
	vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []virtv1.Network{{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}}
	vmi.Status.Interfaces = []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.5", IPs: []string{"10.0.0.5"}}}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm1", CreationTimestamp: created}}
	vm.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	vm.Spec.Template = &virtv1.VirtualMachineInstanceTemplateSpec{}
	vm.Spec.Template.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
	vm.Spec.Template.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	vmi.UID = "uid-1"
	vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "virt-launcher-vm1-abcde",
		Labels: map[string]string{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue, virtv1.CreatedByLabel: "uid-1"}}}
	pod.Spec.NodeName = "node01"
	pod.Spec.Containers = []corev1.Container{{Name: "compute", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("220Mi")}}}}
	objs := []runtime.Object{vmi, vm, pod, &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}}}
	for i, phase := range []virtv1.VirtualMachineInstanceMigrationPhase{virtv1.MigrationSucceeded, virtv1.MigrationFailed, virtv1.MigrationRunning} {
		mig := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("m%d", i+1), UID: "m1", CreationTimestamp: created}}
		mig.Spec.VMIName, mig.Status.Phase = "vm1", phase
		m.ObserveMigrationPhase(mig, created.Add(time.Second))
		objs = append(objs, mig)
	}
	col := &ctrlmetrics.MigrationCollector{}
	col.Use(fakeCache(t, scheme, objs), nil, logr.Discard())
	comp := &ctrlmetrics.ComponentCollector{}
	comp.Use(func() bool { return true }, func() bool { return true })
	objects := &ctrlmetrics.ObjectCollector{}
	objects.Use(fakeCache(t, scheme, objs), nil, logr.Discard())
	reg.MustRegister(col, comp, objects)
	return reg
}

// fakeCache is a fake cache holding objs.
func fakeCache(t *testing.T, scheme *runtime.Scheme, objs []runtime.Object) client.Reader {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build()
}

// everyComponent holds the families every component exports.
func everyComponent() *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(restmetrics.Counter)
	restmetrics.Counter.WithLabelValues("200", "GET", "apiserver:6443", "pods", "list").Inc()
	return reg
}

// apiRegistry holds virt-api's stream counts with one stream of each kind open.
func apiRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	streams, err := api.NewStreamMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []api.StreamKind{api.ConsoleStream, api.VNCStream, api.PortForwardStream} {
		streams.Open(kind, "default", "vm1")
	}
	return reg
}

type row struct{ name, typ, labels, from, help string }

func gather(t *testing.T, from string, reg *prometheus.Registry) []row {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "kubevirt_") {
			continue
		}
		set := map[string]bool{}
		for _, metric := range mf.GetMetric() {
			for _, l := range metric.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "kubernetes_vmi_label_") {
					set[l.GetName()] = true
				}
			}
		}
		var names []string
		for n := range set {
			names = append(names, "`"+n+"`")
		}
		slices.Sort(names)
		rows = append(rows, row{mf.GetName(), strings.ToLower(dto.MetricType_name[int32(mf.GetType())]), strings.Join(names, ", "), from, mf.GetHelp()})
	}
	return rows
}

func render(rows []row) []byte {
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.name, b.name) })
	var b bytes.Buffer
	b.WriteString(`# Metrics

Generated by ` + "`make generate`" + ` from the collectors (internal/metricsdoc); a test fails when the two disagree.
The names, types, labels and help texts are KubeVirt's. Every per-VMI family also carries each VMI label as
` + "`kubernetes_vmi_label_<name>`" + `. virt-handler serves the per-VMI families of the VMs on its node; virt-controller's
leader serves the cluster-wide ones (the other replicas only their own health); a scrape of the pod adds
` + "`namespace`" + ` and ` + "`pod`" + ` to the families that have no such label of their own (deploy/monitoring).

| family | type | labels | served by | help |
|---|---|---|---|---|
`)
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.name, r.typ, r.labels, r.from, strings.ReplaceAll(r.help, "|", `\|`))
	}
	b.WriteString(`
The guest-side memory families (available, unused, usable and cached bytes, swap traffic and page faults) appear once the guest's
balloon driver reports statistics; the migration progress families only while an outgoing migration runs; the filesystem
families for each filesystem on a block device the guest agent reports.

## Not exported

- GPU, vGPU and host-device families: qvirt assigns no host devices.
- ` + "`kubevirt_vmi_guest_load_1m`, `_5m`, `_15m`" + `: they come from the agent's guest-get-load, which the guest agent of QEMU 7.2
  (Debian 12's, the one the test guest runs) does not have.
- ` + "`kubevirt_vm_disk_allocated_size_bytes`" + `: virt-controller does not report claims' allocated sizes yet.
- virt-operator's families (kubevirt_virt_operator_*): virt-operator serves controller-runtime's own metrics only.
`)
	return b.Bytes()
}

func TestMetricsDocMatchesTheCollectors(t *testing.T) {
	var rows []row
	rows = append(rows, gather(t, "virt-handler", handlerRegistry())...)
	rows = append(rows, gather(t, "virt-controller", controllerRegistry(t))...)
	rows = append(rows, gather(t, "virt-api", apiRegistry(t))...)
	rows = append(rows, gather(t, "virt-api, virt-controller, virt-handler", everyComponent())...)
	if len(rows) < 40 {
		t.Fatalf("only %d families gathered", len(rows))
	}
	want := render(rows)
	if *update {
		if err := os.MkdirAll(filepath.Dir(docPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(docPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v (make generate writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/metrics.md differs from what the collectors export; run make generate\n--- want\n%s", want)
	}
}
