package metrics

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

type fixed []VM

func (f fixed) Snapshot() []VM { return f }

func TestCollectorFamiliesAndLabels(t *testing.T) {
	vm := VM{Namespace: "default", Name: "vm1", Labels: map[string]string{"kubevirt.io/domain": "vm1", "app": "web"},
		Stats: &launcherapi.StatsResponse{
			Cpu:    &launcherapi.CPUStats{UserNs: 3e9, SystemNs: 1e9},
			Vcpus:  []*launcherapi.VCPUStats{{Id: 0, RunNs: 2e9, WaitNs: 5e8}},
			Memory: &launcherapi.MemoryStats{GuestBytes: 256 << 20, BalloonActualBytes: 256 << 20, RssBytes: 100 << 20},
			Block:  []*launcherapi.BlockStats{{Drive: "rootdisk", ReadOps: 10, ReadBytes: 4096, ReadTimeNs: 2e9}},
		},
		Interfaces: map[string]NetStats{"default": {RxBytes: 100, TxBytes: 900}},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("node01", fixed{vm, {Namespace: "x", Name: "nostats"}}))
	want := `
# HELP kubevirt_vmi_cpu_usage_seconds_total Total CPU time spent in all modes (sum of both vcpu and hypervisor usage).
# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{kubernetes_vmi_label_app="web",kubernetes_vmi_label_kubevirt_io_domain="vm1",name="vm1",namespace="default",node="node01"} 4
# HELP kubevirt_vmi_network_receive_bytes_total Total network traffic received in bytes.
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",kubernetes_vmi_label_app="web",kubernetes_vmi_label_kubevirt_io_domain="vm1",name="vm1",namespace="default",node="node01"} 900
# HELP kubevirt_vmi_storage_read_times_seconds_total Total time spent on read operations.
# TYPE kubevirt_vmi_storage_read_times_seconds_total counter
kubevirt_vmi_storage_read_times_seconds_total{drive="rootdisk",kubernetes_vmi_label_app="web",kubernetes_vmi_label_kubevirt_io_domain="vm1",name="vm1",namespace="default",node="node01"} 2
# HELP kubevirt_vmi_vcpu_seconds_total Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time).
# TYPE kubevirt_vmi_vcpu_seconds_total counter
kubevirt_vmi_vcpu_seconds_total{id="0",kubernetes_vmi_label_app="web",kubernetes_vmi_label_kubevirt_io_domain="vm1",name="vm1",namespace="default",node="node01",state="running"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kubevirt_vmi_cpu_usage_seconds_total", "kubevirt_vmi_network_receive_bytes_total",
		"kubevirt_vmi_storage_read_times_seconds_total", "kubevirt_vmi_vcpu_seconds_total"); err != nil {
		t.Error(err)
	}
	// The guest-side memory families stay absent until the balloon driver reports.
	if n, err := testutil.GatherAndCount(reg, "kubevirt_vmi_memory_unused_bytes"); err != nil || n != 0 {
		t.Errorf("unused bytes without guest stats: %d %v", n, err)
	}
	if n, _ := testutil.GatherAndCount(reg); n < 20 {
		t.Errorf("only %d series", n)
	}
}

func TestReadNetDevOfThisProcess(t *testing.T) {
	got, err := ReadNetDev(os.Getpid(), "lo")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["lo"]; !ok {
		t.Errorf("lo missing: %v", got)
	}
}

// TestMigrationFamilies: a VM migrating away reports its RAM and disk copy as one migration's
// data, and its rates; a VM that is not migrating has no migration series.
func TestMigrationFamilies(t *testing.T) {
	moving := VM{Namespace: "default", Name: "mover", Stats: &launcherapi.StatsResponse{Migration: &launcherapi.MigrationStatus{
		Outgoing: true, State: "active", TotalBytes: 1000, TransferredBytes: 600, RemainingBytes: 400,
		DiskTotalBytes: 5000, DiskTransferredBytes: 4000, DiskBytesPerSecond: 300, MemoryBytesPerSecond: 200, DirtyMemoryBytesPerSecond: 50,
	}}}
	still := VM{Namespace: "default", Name: "still", Stats: &launcherapi.StatsResponse{}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("node01", fixed{moving, still}))
	want := `
# HELP kubevirt_vmi_migration_data_processed_bytes The total Guest OS data processed and migrated to the new VM.
# TYPE kubevirt_vmi_migration_data_processed_bytes gauge
kubevirt_vmi_migration_data_processed_bytes{name="mover",namespace="default",node="node01"} 4600
# HELP kubevirt_vmi_migration_data_remaining_bytes The remaining guest OS data to be migrated to the new VM.
# TYPE kubevirt_vmi_migration_data_remaining_bytes gauge
kubevirt_vmi_migration_data_remaining_bytes{name="mover",namespace="default",node="node01"} 1400
# HELP kubevirt_vmi_migration_data_total_bytes The total Guest OS data to be migrated to the new VM.
# TYPE kubevirt_vmi_migration_data_total_bytes counter
kubevirt_vmi_migration_data_total_bytes{name="mover",namespace="default",node="node01"} 6000
# HELP kubevirt_vmi_migration_dirty_memory_rate_bytes The rate of memory being dirty in the Guest OS.
# TYPE kubevirt_vmi_migration_dirty_memory_rate_bytes gauge
kubevirt_vmi_migration_dirty_memory_rate_bytes{name="mover",namespace="default",node="node01"} 50
# HELP kubevirt_vmi_migration_disk_transfer_rate_bytes The rate at which the disk is being transferred.
# TYPE kubevirt_vmi_migration_disk_transfer_rate_bytes gauge
kubevirt_vmi_migration_disk_transfer_rate_bytes{name="mover",namespace="default",node="node01"} 300
# HELP kubevirt_vmi_migration_memory_transfer_rate_bytes The rate at which the memory is being transferred.
# TYPE kubevirt_vmi_migration_memory_transfer_rate_bytes gauge
kubevirt_vmi_migration_memory_transfer_rate_bytes{name="mover",namespace="default",node="node01"} 200
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kubevirt_vmi_migration_data_processed_bytes", "kubevirt_vmi_migration_data_remaining_bytes", "kubevirt_vmi_migration_data_total_bytes",
		"kubevirt_vmi_migration_dirty_memory_rate_bytes", "kubevirt_vmi_migration_disk_transfer_rate_bytes", "kubevirt_vmi_migration_memory_transfer_rate_bytes"); err != nil {
		t.Error(err)
	}
}

// BenchmarkScrape20VMs serves one node agent's /metrics with 20 VMs whose every statistic is
// known (two vCPUs, two disks, two NICs and a filesystem each, guest memory statistics, a dirty rate) and reports
// the time and size of one scrape: the collector reads the agent's cache and never QEMU.
func BenchmarkScrape20VMs(b *testing.B) {
	vms := make(fixed, 20)
	for i := range vms {
		vms[i] = VM{Namespace: "default", Name: "vm-" + strconv.Itoa(i), Labels: map[string]string{"kubevirt.io/domain": "vm", "app": "web"},
			Stats: &launcherapi.StatsResponse{
				Cpu:   &launcherapi.CPUStats{UserNs: 3e9, SystemNs: 1e9},
				Vcpus: []*launcherapi.VCPUStats{{Id: 0, RunNs: 2e9, WaitNs: 5e8}, {Id: 1, RunNs: 2e9, WaitNs: 5e8}},
				Memory: &launcherapi.MemoryStats{GuestBytes: 256 << 20, BalloonActualBytes: 256 << 20, RssBytes: 100 << 20,
					AvailableBytes: 200 << 20, UnusedBytes: 100 << 20, UsableBytes: 150 << 20, MajorFaults: 1, MinorFaults: 2, CachedBytes: 1 << 20},
				Block:     []*launcherapi.BlockStats{{Drive: "rootdisk", ReadOps: 10}, {Drive: "data", WriteOps: 3}},
				DirtyRate: &launcherapi.DirtyRate{BytesPerSecond: 1 << 20},
			},
			Interfaces:  map[string]NetStats{"default": {RxBytes: 100}, "second": {TxBytes: 100}},
			Filesystems: []*launcherapi.GuestFilesystem{{DiskName: "vda1", MountPoint: "/", Type: "ext4", UsedBytes: 1 << 30, TotalBytes: 4 << 30}},
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector("node01", vms))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size)/1024, "KiB/scrape")
}

// TestFilesystemFamilies: each filesystem the guest agent reports is a series of capacity and
// one of use, labelled as KubeVirt labels them; a VM without an agent has none.
func TestFilesystemFamilies(t *testing.T) {
	withAgent := VM{Namespace: "default", Name: "vm1", Stats: &launcherapi.StatsResponse{},
		Filesystems: []*launcherapi.GuestFilesystem{{DiskName: "loop0", MountPoint: "/mnt/data", Type: "ext2", UsedBytes: 1 << 20, TotalBytes: 8 << 20}}}
	without := VM{Namespace: "default", Name: "vm2", Stats: &launcherapi.StatsResponse{}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("node01", fixed{withAgent, without}))
	want := `
# HELP kubevirt_vmi_filesystem_capacity_bytes Total VM filesystem capacity in bytes.
# TYPE kubevirt_vmi_filesystem_capacity_bytes gauge
kubevirt_vmi_filesystem_capacity_bytes{disk_name="loop0",file_system_type="ext2",mount_point="/mnt/data",name="vm1",namespace="default",node="node01"} 8.388608e+06
# HELP kubevirt_vmi_filesystem_used_bytes Used VM filesystem capacity in bytes.
# TYPE kubevirt_vmi_filesystem_used_bytes gauge
kubevirt_vmi_filesystem_used_bytes{disk_name="loop0",file_system_type="ext2",mount_point="/mnt/data",name="vm1",namespace="default",node="node01"} 1.048576e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubevirt_vmi_filesystem_capacity_bytes", "kubevirt_vmi_filesystem_used_bytes"); err != nil {
		t.Error(err)
	}
}
