package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

var (
	vmRequests = prometheus.NewDesc("kubevirt_vm_resource_requests", "Resources requested by Virtual Machine. Reports memory and CPU requests.",
		[]string{"name", "namespace", "resource", "unit", "source"}, nil)
	vmLimits = prometheus.NewDesc("kubevirt_vm_resource_limits", "Resource limits set for a Virtual Machine. Reports CPU and memory limits only when they are defined.",
		[]string{"name", "namespace", "resource", "unit"}, nil)
)

// vmResources reports a VM's template as KubeVirt does: each memory and CPU figure it sets, by
// where it comes from (source), and what the guest gets in the end (guest_effective).
func vmResources(ch chan<- prometheus.Metric, vm *virtv1.VirtualMachine) {
	if vm.Spec.Template == nil {
		return
	}
	d := &vm.Spec.Template.Spec.Domain
	req := func(v float64, res, unit, source string) {
		ch <- prometheus.MustNewConstMetric(vmRequests, prometheus.GaugeValue, v, vm.Name, vm.Namespace, res, unit, source)
	}
	lim := func(v float64, res, unit string) {
		ch <- prometheus.MustNewConstMetric(vmLimits, prometheus.GaugeValue, v, vm.Name, vm.Namespace, res, unit)
	}
	memReq := d.Resources.Requests.Memory()
	if !memReq.IsZero() {
		req(float64(memReq.Value()), "memory", "bytes", "domain")
	}
	var guest *resource.Quantity
	if d.Memory != nil && d.Memory.Guest != nil && !d.Memory.Guest.IsZero() {
		guest = d.Memory.Guest
		req(float64(guest.Value()), "memory", "bytes", "guest")
	}
	if l := d.Resources.Limits.Memory(); !l.IsZero() {
		lim(float64(l.Value()), "memory", "bytes")
	}
	// What the guest sees: memory.guest, else the request (KubeVirt's GetVirtualMemory).
	switch {
	case guest != nil:
		req(float64(guest.Value()), "memory", "bytes", "guest_effective")
	case !memReq.IsZero():
		req(float64(memReq.Value()), "memory", "bytes", "guest_effective")
	}

	vcpus := 1.0
	if c := d.CPU; c != nil {
		for _, t := range []struct {
			n    uint32
			unit string
		}{{c.Cores, "cores"}, {c.Threads, "threads"}, {c.Sockets, "sockets"}} {
			if t.n != 0 {
				req(float64(t.n), "cpu", t.unit, "domain")
			}
		}
		vcpus = float64(max(c.Cores, 1) * max(c.Threads, 1) * max(c.Sockets, 1))
	}
	if cpu := d.Resources.Requests.Cpu(); !cpu.IsZero() {
		req(float64(cpu.MilliValue())/1000, "cpu", "cores", "requests")
	} else if d.CPU == nil {
		for _, unit := range []string{"cores", "threads", "sockets"} {
			req(1, "cpu", unit, "default")
		}
	}
	if l := d.Resources.Limits.Cpu(); !l.IsZero() {
		lim(float64(l.MilliValue())/1000, "cpu", "cores")
	}
	req(vcpus, "cpu", "cores", "guest_effective")
}
