// Package metrics exposes KubeVirt's per-VMI Prometheus families (kubevirt_vmi_*) from the
// statistics the node agent caches: a scrape reads the cache and never queries QEMU.
package metrics

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// NetStats are a tap's counters as the host sees them.
type NetStats struct {
	RxBytes, TxBytes, RxPackets, TxPackets, RxErrors, TxErrors, RxDropped, TxDropped uint64
}

// VM is one VMI's latest statistics.
type VM struct {
	Namespace, Name string
	Labels          map[string]string
	Stats           *launcherapi.StatsResponse
	// Interfaces maps the VMI interface name to its tap's counters.
	Interfaces map[string]NetStats
	// Filesystems are what the guest agent last reported; none without an agent.
	Filesystems []*launcherapi.GuestFilesystem
}

// Source returns the cached statistics of the VMs on this node.
type Source interface {
	Snapshot() []VM
}

// Collector turns a Source into metrics.
type Collector struct {
	node string
	src  Source
	// descs caches each family's description by its label names: building one checks every
	// name, which would otherwise dominate a scrape.
	mu    sync.Mutex
	descs map[string]*prometheus.Desc
}

// NewCollector reports the VMs of src as running on node.
func NewCollector(node string, src Source) *Collector {
	return &Collector{node: node, src: src, descs: map[string]*prometheus.Desc{}}
}

const maxDescs = 4096

// desc returns the description of family f with the given label names.
func (c *Collector) desc(f family, labelNames []string) *prometheus.Desc {
	key := f.name + "\x00" + strings.Join(labelNames, "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.descs[key]
	if !ok {
		if len(c.descs) >= maxDescs { // VMs with ever new label names: start over
			clear(c.descs)
		}
		d = prometheus.NewDesc(ns+f.name, f.help, labelNames, nil)
		c.descs[key] = d
	}
	return d
}

const ns = "kubevirt_vmi_"

type family struct {
	name, help string
	typ        prometheus.ValueType
	extra      []string
}

var families = map[string]family{
	"cpu_usage":       {"cpu_usage_seconds_total", "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage).", prometheus.CounterValue, nil},
	"cpu_user":        {"cpu_user_usage_seconds_total", "Total CPU time spent in user mode.", prometheus.CounterValue, nil},
	"cpu_system":      {"cpu_system_usage_seconds_total", "Total CPU time spent in system mode.", prometheus.CounterValue, nil},
	"vcpu_seconds":    {"vcpu_seconds_total", "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time).", prometheus.CounterValue, []string{"id", "state"}},
	"vcpu_delay":      {"vcpu_delay_seconds_total", "Amount of time spent by each vcpu waiting in the queue instead of running.", prometheus.CounterValue, []string{"id"}},
	"mem_resident":    {"memory_resident_bytes", "Resident set size of the process running the domain.", prometheus.GaugeValue, nil},
	"mem_available":   {"memory_available_bytes", "Amount of usable memory as seen by the domain.", prometheus.GaugeValue, nil},
	"mem_unused":      {"memory_unused_bytes", "The amount of memory left completely unused by the system.", prometheus.GaugeValue, nil},
	"mem_used":        {"memory_used_bytes", "Amount of `used` memory as seen by the domain.", prometheus.GaugeValue, nil},
	"mem_usable":      {"memory_usable_bytes", "The amount of memory which can be reclaimed by balloon without pushing the guest system to swap.", prometheus.GaugeValue, nil},
	"mem_balloon":     {"memory_actual_balloon_bytes", "Current balloon size in bytes.", prometheus.GaugeValue, nil},
	"mem_domain":      {"memory_domain_bytes", "The amount of memory allocated to the domain.", prometheus.GaugeValue, nil},
	"mem_majflt":      {"memory_pgmajfault_total", "The number of page faults when disk IO was required.", prometheus.CounterValue, nil},
	"mem_minflt":      {"memory_pgminfault_total", "The number of other page faults, when disk IO was not required.", prometheus.CounterValue, nil},
	"mem_swap_in":     {"memory_swap_in_traffic_bytes", "The total amount of data read from swap space of the guest in bytes.", prometheus.GaugeValue, nil},
	"mem_swap_out":    {"memory_swap_out_traffic_bytes", "The total amount of memory written out to swap space of the guest in bytes.", prometheus.GaugeValue, nil},
	"mem_cached":      {"memory_cached_bytes", "The amount of memory that is being used to cache I/O and is available to be reclaimed, corresponds to the sum of `Buffers` + `Cached` + `SwapCached` in `/proc/meminfo`.", prometheus.GaugeValue, nil},
	"net_rx_bytes":    {"network_receive_bytes_total", "Total network traffic received in bytes.", prometheus.CounterValue, []string{"interface"}},
	"net_tx_bytes":    {"network_transmit_bytes_total", "Total network traffic transmitted in bytes.", prometheus.CounterValue, []string{"interface"}},
	"net_rx_packets":  {"network_receive_packets_total", "Total network traffic received packets.", prometheus.CounterValue, []string{"interface"}},
	"net_tx_packets":  {"network_transmit_packets_total", "Total network traffic transmitted packets.", prometheus.CounterValue, []string{"interface"}},
	"net_rx_errors":   {"network_receive_errors_total", "Total network received error packets.", prometheus.CounterValue, []string{"interface"}},
	"net_tx_errors":   {"network_transmit_errors_total", "Total network transmitted error packets.", prometheus.CounterValue, []string{"interface"}},
	"net_rx_dropped":  {"network_receive_packets_dropped_total", "The total number of rx packets dropped on vNIC interfaces.", prometheus.CounterValue, []string{"interface"}},
	"net_tx_dropped":  {"network_transmit_packets_dropped_total", "The total number of tx packets dropped on vNIC interfaces.", prometheus.CounterValue, []string{"interface"}},
	"blk_iops_read":   {"storage_iops_read_total", "Total number of I/O read operations.", prometheus.CounterValue, []string{"drive"}},
	"blk_iops_write":  {"storage_iops_write_total", "Total number of I/O write operations.", prometheus.CounterValue, []string{"drive"}},
	"blk_read_bytes":  {"storage_read_traffic_bytes_total", "Total number of bytes read from storage.", prometheus.CounterValue, []string{"drive"}},
	"blk_write_bytes": {"storage_write_traffic_bytes_total", "Total number of written bytes.", prometheus.CounterValue, []string{"drive"}},
	"blk_read_time":   {"storage_read_times_seconds_total", "Total time spent on read operations.", prometheus.CounterValue, []string{"drive"}},
	"blk_write_time":  {"storage_write_times_seconds_total", "Total time spent on write operations.", prometheus.CounterValue, []string{"drive"}},
	"blk_flush":       {"storage_flush_requests_total", "Total storage flush requests.", prometheus.CounterValue, []string{"drive"}},
	"blk_flush_time":  {"storage_flush_times_seconds_total", "Total time spent on cache flushing.", prometheus.CounterValue, []string{"drive"}},
	"dirty_rate":      {"dirty_rate_bytes_per_second", "Guest dirty-rate in bytes per second.", prometheus.GaugeValue, nil},
	"mig_total":       {"migration_data_total_bytes", "The total Guest OS data to be migrated to the new VM.", prometheus.CounterValue, nil},
	"mig_processed":   {"migration_data_processed_bytes", "The total Guest OS data processed and migrated to the new VM.", prometheus.GaugeValue, nil},
	"mig_remaining":   {"migration_data_remaining_bytes", "The remaining guest OS data to be migrated to the new VM.", prometheus.GaugeValue, nil},
	"mig_dirty_rate":  {"migration_dirty_memory_rate_bytes", "The rate of memory being dirty in the Guest OS.", prometheus.GaugeValue, nil},
	"mig_mem_rate":    {"migration_memory_transfer_rate_bytes", "The rate at which the memory is being transferred.", prometheus.GaugeValue, nil},
	"mig_disk_rate":   {"migration_disk_transfer_rate_bytes", "The rate at which the disk is being transferred.", prometheus.GaugeValue, nil},
	"fs_capacity":     {"filesystem_capacity_bytes", "Total VM filesystem capacity in bytes.", prometheus.GaugeValue, fsLabels},
	"fs_used":         {"filesystem_used_bytes", "Used VM filesystem capacity in bytes.", prometheus.GaugeValue, fsLabels},
}

var fsLabels = []string{"disk_name", "mount_point", "file_system_type"}

var baseLabels = []string{"node", "namespace", "name"}

// Describe sends nothing: the label set varies with each VMI's labels, so the collector is
// unchecked, as KubeVirt's is.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect emits every family for every VM in the cache.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, vm := range c.src.Snapshot() {
		if vm.Stats == nil {
			continue
		}
		c.collectVM(ch, vm)
	}
}

func (c *Collector) collectVM(ch chan<- prometheus.Metric, vm VM) {
	labelNames, labelValues := vmLabels(c.node, vm)
	emit := func(key string, v float64, extra ...string) {
		f := families[key]
		desc := c.desc(f, append(append([]string{}, labelNames...), f.extra...))
		ch <- prometheus.MustNewConstMetric(desc, f.typ, v, append(append([]string{}, labelValues...), extra...)...)
	}
	s := vm.Stats
	const nsPerSec = 1e9
	if cpu := s.Cpu; cpu != nil {
		emit("cpu_usage", float64(cpu.UserNs+cpu.SystemNs)/nsPerSec)
		emit("cpu_user", float64(cpu.UserNs)/nsPerSec)
		emit("cpu_system", float64(cpu.SystemNs)/nsPerSec)
	}
	for _, v := range s.Vcpus {
		id := itoa(v.Id)
		emit("vcpu_seconds", float64(v.RunNs)/nsPerSec, id, "running")
		emit("vcpu_delay", float64(v.WaitNs)/nsPerSec, id)
	}
	if m := s.Memory; m != nil {
		emit("mem_resident", float64(m.RssBytes))
		emit("mem_domain", float64(m.GuestBytes))
		emit("mem_balloon", float64(m.BalloonActualBytes))
		// The guest-side numbers exist only once its balloon driver reports them.
		if m.AvailableBytes > 0 {
			emit("mem_available", float64(m.AvailableBytes))
			emit("mem_unused", float64(m.UnusedBytes))
			emit("mem_usable", float64(m.UsableBytes))
			emit("mem_used", float64(m.AvailableBytes-min(m.UnusedBytes, m.AvailableBytes)))
			emit("mem_majflt", float64(m.MajorFaults))
			emit("mem_minflt", float64(m.MinorFaults))
			emit("mem_swap_in", float64(m.SwapInBytes))
			emit("mem_swap_out", float64(m.SwapOutBytes))
			emit("mem_cached", float64(m.CachedBytes))
		}
	}
	for _, name := range sortedKeys(vm.Interfaces) {
		n := vm.Interfaces[name]
		// The host's receive on a tap is the guest's transmit, and the other way round.
		emit("net_rx_bytes", float64(n.TxBytes), name)
		emit("net_tx_bytes", float64(n.RxBytes), name)
		emit("net_rx_packets", float64(n.TxPackets), name)
		emit("net_tx_packets", float64(n.RxPackets), name)
		emit("net_rx_errors", float64(n.TxErrors), name)
		emit("net_tx_errors", float64(n.RxErrors), name)
		emit("net_rx_dropped", float64(n.TxDropped), name)
		emit("net_tx_dropped", float64(n.RxDropped), name)
	}
	for _, b := range s.Block {
		d := b.Drive
		emit("blk_iops_read", float64(b.ReadOps), d)
		emit("blk_iops_write", float64(b.WriteOps), d)
		emit("blk_read_bytes", float64(b.ReadBytes), d)
		emit("blk_write_bytes", float64(b.WriteBytes), d)
		emit("blk_read_time", float64(b.ReadTimeNs)/nsPerSec, d)
		emit("blk_write_time", float64(b.WriteTimeNs)/nsPerSec, d)
		emit("blk_flush", float64(b.FlushOps), d)
		emit("blk_flush_time", float64(b.FlushTimeNs)/nsPerSec, d)
	}
	if d := s.DirtyRate; d != nil {
		emit("dirty_rate", float64(d.BytesPerSecond))
	}
	// The guest agent's view of the guest's filesystems.
	for _, fs := range vm.Filesystems {
		emit("fs_capacity", float64(fs.TotalBytes), fs.DiskName, fs.MountPoint, fs.Type)
		emit("fs_used", float64(fs.UsedBytes), fs.DiskName, fs.MountPoint, fs.Type)
	}
	// An outgoing migration's progress: its data is the RAM and the local disks' copy.
	if m := s.Migration; m != nil {
		diskLeft := m.DiskTotalBytes - min(m.DiskTransferredBytes, m.DiskTotalBytes)
		emit("mig_total", float64(m.TotalBytes+m.DiskTotalBytes))
		emit("mig_processed", float64(m.TransferredBytes+m.DiskTransferredBytes))
		emit("mig_remaining", float64(m.RemainingBytes+diskLeft))
		emit("mig_dirty_rate", float64(m.DirtyMemoryBytesPerSecond))
		emit("mig_mem_rate", float64(m.MemoryBytesPerSecond))
		emit("mig_disk_rate", float64(m.DiskBytesPerSecond))
	}
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// vmLabels adds each VMI label as kubernetes_vmi_label_<sanitised name>, as KubeVirt does.
func vmLabels(node string, vm VM) ([]string, []string) {
	names := append([]string{}, baseLabels...)
	values := []string{node, vm.Namespace, vm.Name}
	seen := map[string]bool{}
	for _, k := range sortedKeys(vm.Labels) {
		n := "kubernetes_vmi_label_" + invalidLabelChars.ReplaceAllString(k, "_")
		if seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
		values = append(values, vm.Labels[k])
	}
	return names, values
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
