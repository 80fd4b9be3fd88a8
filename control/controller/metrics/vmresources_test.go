package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

type vmsCollector []*virtv1.VirtualMachine

func (c vmsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- vmRequests; ch <- vmLimits }
func (c vmsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, vm := range c {
		vmResources(ch, vm)
	}
}

func TestVMResourceRequestsAndLimits(t *testing.T) {
	q := resource.MustParse
	guest := q("1Gi")
	sized := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sized"}, Spec: virtv1.VirtualMachineSpec{
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
			CPU:    &virtv1.CPU{Cores: 2, Sockets: 1},
			Memory: &virtv1.Memory{Guest: &guest},
			Resources: virtv1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: q("512Mi"), corev1.ResourceCPU: q("500m")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: q("2Gi"), corev1.ResourceCPU: q("2")},
			},
		}}},
	}}
	plain := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}, Spec: virtv1.VirtualMachineSpec{
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
			Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("128Mi")}},
		}}},
	}}
	want := `
# HELP kubevirt_vm_resource_limits Resource limits set for a Virtual Machine. Reports CPU and memory limits only when they are defined.
# TYPE kubevirt_vm_resource_limits gauge
kubevirt_vm_resource_limits{name="sized",namespace="ns",resource="cpu",unit="cores"} 2
kubevirt_vm_resource_limits{name="sized",namespace="ns",resource="memory",unit="bytes"} 2.147483648e+09
# HELP kubevirt_vm_resource_requests Resources requested by Virtual Machine. Reports memory and CPU requests.
# TYPE kubevirt_vm_resource_requests gauge
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="cpu",source="default",unit="cores"} 1
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="cpu",source="default",unit="sockets"} 1
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="cpu",source="default",unit="threads"} 1
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="cpu",source="guest_effective",unit="cores"} 1
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="memory",source="domain",unit="bytes"} 1.34217728e+08
kubevirt_vm_resource_requests{name="plain",namespace="ns",resource="memory",source="guest_effective",unit="bytes"} 1.34217728e+08
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="cpu",source="domain",unit="cores"} 2
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="cpu",source="domain",unit="sockets"} 1
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="cpu",source="guest_effective",unit="cores"} 2
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="cpu",source="requests",unit="cores"} 0.5
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="memory",source="domain",unit="bytes"} 5.36870912e+08
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="memory",source="guest",unit="bytes"} 1.073741824e+09
kubevirt_vm_resource_requests{name="sized",namespace="ns",resource="memory",source="guest_effective",unit="bytes"} 1.073741824e+09
`
	if err := testutil.CollectAndCompare(vmsCollector{sized, plain, {}}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
