package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
	"github.com/qvirt/qvirt/control/webhooks"
)

// The labels KubeVirt puts on a VMI's and a VM's information families, in its order.
var (
	osLabels  = []string{"os", "workload", "flavor", "instance_type", "preference", "guest_os_kernel_release", "guest_os_machine", "guest_os_arch", "guest_os_name", "guest_os_version_id"}
	vmiInfo   = prometheus.NewDesc("kubevirt_vmi_info", "Information about VirtualMachineInstances.", append(append([]string{"node", "namespace", "name", "phase"}, osLabels...), "evictable", "outdated", "vmi_pod"), nil)
	vmiPhases = prometheus.NewDesc("kubevirt_vmi_phase_count",
		"Sum of VMIs per phase and node. `phase` can be one of the following: [`Pending`, `Scheduling`, `Scheduled`, `Running`, `Succeeded`, `Failed`, `Unknown`].",
		append([]string{"node", "phase"}, osLabels...), nil)
	vmiAddresses = prometheus.NewDesc("kubevirt_vmi_status_addresses",
		"The addresses of a VirtualMachineInstance. This metric provides the address of an available network interface associated with the VMI in the 'address' label, and about the type of address, such as internal IP, in the 'type' label.",
		[]string{"node", "namespace", "name", "network_name", "address", "type"}, nil)
	vmiVNIC = prometheus.NewDesc("kubevirt_vmi_vnic_info", "Details of Virtual Machine Instance (VMI) vNIC interfaces.",
		[]string{"name", "namespace", "vnic_name", "binding_type", "network", "binding_name", "model"}, nil)
	nonEvictable = prometheus.NewDesc("kubevirt_vmi_non_evictable",
		"Indication for a VirtualMachine that its eviction strategy is set to Live Migration but is not migratable.",
		[]string{"node", "namespace", "name"}, nil)
	launcherOverhead = prometheus.NewDesc("kubevirt_vmi_launcher_memory_overhead_bytes",
		"Estimation of the memory amount required for virt-launcher's infrastructure components (e.g. libvirt, QEMU).", []string{"namespace", "name"}, nil)
	emulation = prometheus.NewDesc("kubevirt_configuration_emulation_enabled", "Indicates whether the Software Emulation is enabled in the configuration.", nil, nil)
	vmInfo    = prometheus.NewDesc("kubevirt_vm_info", "Information about Virtual Machines.", append([]string{"name", "namespace"}, append(osLabels, "status", "status_group")...), nil)
	// vmGroupTransition is, per status group, the family of the last transition into it.
	vmGroupTransition = map[string]*prometheus.Desc{}
)

// statusGroups are KubeVirt's groups of a VM's printable status.
var statusGroups = map[virtv1.VirtualMachinePrintableStatus]string{
	virtv1.VirtualMachineStatusProvisioning: "starting", virtv1.VirtualMachineStatusStarting: "starting",
	virtv1.VirtualMachineStatusRunning:   "running",
	virtv1.VirtualMachineStatusMigrating: "migrating",
	virtv1.VirtualMachineStatusStopped:   "non_running", virtv1.VirtualMachineStatusPaused: "non_running",
	virtv1.VirtualMachineStatusStopping: "non_running", virtv1.VirtualMachineStatusTerminating: "non_running",
	virtv1.VirtualMachineStatusCrashLoopBackOff: "error", virtv1.VirtualMachineStatusUnknown: "error",
	virtv1.VirtualMachineStatusUnschedulable: "error", virtv1.VirtualMachineStatusErrImagePull: "error",
	virtv1.VirtualMachineStatusImagePullBackOff: "error",
}

var groupWords = map[string]string{"starting": "starting", "running": "running", "migrating": "migrating", "non_running": "non-running", "error": "error"}

func init() {
	for group, word := range groupWords {
		vmGroupTransition[group] = prometheus.NewDesc("kubevirt_vm_"+group+"_status_last_transition_timestamp_seconds",
			"Virtual Machine last transition timestamp to "+word+" status.", []string{"name", "namespace", "status"}, nil)
	}
}

// ObjectCollector reports KubeVirt's families about the VMI and VM objects (among them the VMIs
// whose eviction would be refused) and the cluster's configuration from the controller's cache at each scrape, from the leading replica only.
type ObjectCollector struct{ leaderCache }

// Describe sends every family.
func (c *ObjectCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vmiInfo, vmiPhases, vmiAddresses, vmiVNIC, nonEvictable, launcherOverhead, emulation, vmInfo, vmRequests, vmLimits} {
		ch <- d
	}
	for _, d := range vmGroupTransition {
		ch <- d
	}
}

// Collect reads the KubeVirt CR, the VMIs and the VMs.
func (c *ObjectCollector) Collect(ch chan<- prometheus.Metric) {
	reader, log := c.current()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var kvs virtv1.KubeVirtList
	if err := reader.List(ctx, &kvs); err != nil {
		log.Error(err, "Listing KubeVirt CRs for metrics")
		return
	}
	cfg := config.From(config.Oldest(kvs.Items), config.VirtController)
	ch <- prometheus.MustNewConstMetric(emulation, prometheus.GaugeValue, boolValue(cfg.UseEmulation))

	var vmis virtv1.VirtualMachineInstanceList
	if err := reader.List(ctx, &vmis); err != nil {
		log.Error(err, "Listing VMIs for metrics")
		return
	}
	pods, err := launcherPods(ctx, reader)
	if err != nil {
		log.Error(err, "Listing launcher pods for metrics")
		return
	}
	phases := map[[12]string]float64{}
	for i := range vmis.Items {
		v := &vmis.Items[i]
		os := osValues(v.Annotations, v.Status.GuestOSInfo)
		var key [12]string
		key[0], key[1] = v.Status.NodeName, string(v.Status.Phase)
		copy(key[2:], os)
		phases[key]++
		verdict, _ := webhooks.EvictionDecision(v, cfg.EvictionStrategy)
		refused := verdict == webhooks.EvictionRefused
		if v.Status.Phase == virtv1.Running {
			ch <- prometheus.MustNewConstMetric(nonEvictable, prometheus.GaugeValue, boolValue(refused), v.Status.NodeName, v.Namespace, v.Name)
		}
		info := append([]string{v.Status.NodeName, v.Namespace, v.Name, string(v.Status.Phase)}, os...)
		pod, podName := pods[string(v.UID)][v.Status.NodeName], "<none>"
		if pod != nil {
			podName = pod.Name
		}
		info = append(info, boolWord(!refused), "false", podName)
		ch <- prometheus.MustNewConstMetric(vmiInfo, prometheus.GaugeValue, 1, info...)
		if overhead, ok := memoryOverhead(v, pod); ok {
			ch <- prometheus.MustNewConstMetric(launcherOverhead, prometheus.GaugeValue, overhead, v.Namespace, v.Name)
		}
		for _, ifc := range v.Status.Interfaces {
			for _, ip := range ifc.IPs {
				ch <- prometheus.MustNewConstMetric(vmiAddresses, prometheus.GaugeValue, 1, v.Status.NodeName, v.Namespace, v.Name, ifc.Name, ip, "InternalIP")
			}
		}
		for _, ifc := range v.Spec.Domain.Devices.Interfaces {
			bindingType, bindingName := binding(ifc)
			model := ifc.Model
			if model == "" {
				model = "virtio"
			}
			ch <- prometheus.MustNewConstMetric(vmiVNIC, prometheus.GaugeValue, 1, v.Name, v.Namespace, ifc.Name, bindingType, networkOf(v.Spec.Networks, ifc.Name), bindingName, model)
		}
	}
	for key, n := range phases {
		ch <- prometheus.MustNewConstMetric(vmiPhases, prometheus.GaugeValue, n, key[:]...)
	}

	var vms virtv1.VirtualMachineList
	if err := reader.List(ctx, &vms); err != nil {
		log.Error(err, "Listing VMs for metrics")
		return
	}
	for i := range vms.Items {
		vm := &vms.Items[i]
		status := vm.Status.PrintableStatus
		group := statusGroups[status]
		if group == "" {
			group = "error"
		}
		var tmplAnnotations map[string]string
		if vm.Spec.Template != nil {
			tmplAnnotations = vm.Spec.Template.ObjectMeta.Annotations
		}
		os := osValues(merge(vm.Annotations, tmplAnnotations), virtv1.VirtualMachineInstanceGuestOSInfo{})
		if vm.Spec.Instancetype != nil && vm.Spec.Instancetype.Name != "" {
			os[3] = vm.Spec.Instancetype.Name
		}
		if vm.Spec.Preference != nil && vm.Spec.Preference.Name != "" {
			os[4] = vm.Spec.Preference.Name
		}
		ch <- prometheus.MustNewConstMetric(vmInfo, prometheus.GaugeValue, 1, append(append([]string{vm.Name, vm.Namespace}, os...), string(status), group)...)
		vmResources(ch, vm)
		since := float64(vm.CreationTimestamp.Unix())
		for _, cond := range vm.Status.Conditions {
			if cond.Type == virtv1.VirtualMachineReady && !cond.LastTransitionTime.IsZero() {
				since = float64(cond.LastTransitionTime.Unix())
			}
		}
		for g, d := range vmGroupTransition {
			v := 0.0
			if g == group {
				v = since
			}
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, vm.Name, vm.Namespace, string(status))
		}
	}
}

// osValues are the os, workload and flavor annotations (KubeVirt's template annotations), the
// instance type and preference, and what the guest reports about itself; "<none>" where unknown.
func osValues(annotations map[string]string, guest virtv1.VirtualMachineInstanceGuestOSInfo) []string {
	v := []string{
		annotations["vm.kubevirt.io/os"], annotations["vm.kubevirt.io/workload"], annotations["vm.kubevirt.io/flavor"],
		annotations["kubevirt.io/instancetype-name"], annotations["kubevirt.io/preference-name"],
		guest.KernelRelease, guest.Machine, "", guest.Name, guest.VersionID,
	}
	if v[3] == "" {
		v[3] = annotations["kubevirt.io/cluster-instancetype-name"]
	}
	if v[4] == "" {
		v[4] = annotations["kubevirt.io/cluster-preference-name"]
	}
	for i := range v {
		if v[i] == "" {
			v[i] = "<none>"
		}
	}
	return v
}

func merge(a, b map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// binding names an interface's binding as KubeVirt's vnic_info does: a core binding by its
// method, a plugin by its name.
func binding(ifc virtv1.Interface) (bindingType, name string) {
	switch {
	case ifc.Binding != nil:
		return "plugin", ifc.Binding.Name
	case ifc.Masquerade != nil:
		return "core", "masquerade"
	case ifc.Bridge != nil:
		return "core", "bridge"
	case ifc.SRIOV != nil:
		return "core", "sriov"
	case ifc.PasstBinding != nil:
		return "core", "passt"
	}
	return "core", "<none>"
}

// networkOf is the network an interface attaches to: "pod networking" or the Multus network.
func networkOf(networks []virtv1.Network, name string) string {
	for _, n := range networks {
		if n.Name != name {
			continue
		}
		switch {
		case n.Pod != nil:
			return "pod networking"
		case n.Multus != nil:
			return n.Multus.NetworkName
		}
	}
	return "<none>"
}

// launcherPods are the launcher pods by VMI uid and node.
func launcherPods(ctx context.Context, reader client.Reader) (map[string]map[string]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.MatchingLabels{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue}); err != nil {
		return nil, err
	}
	byVMI := map[string]map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		uid := p.Labels[virtv1.CreatedByLabel]
		if byVMI[uid] == nil {
			byVMI[uid] = map[string]*corev1.Pod{}
		}
		byVMI[uid][p.Spec.NodeName] = p
	}
	return byVMI, nil
}

// memoryOverhead is what the VMI's launcher pod requests beyond the guest's memory: the
// launcher's, QEMU's and the page tables' share that the pod is sized with.
func memoryOverhead(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) (float64, bool) {
	q, err := launcherpod.GuestMemory(v)
	if err != nil || pod == nil {
		return 0, false
	}
	guest := q.Value()
	var requested int64
	for _, c := range pod.Spec.Containers {
		requested += c.Resources.Requests.Memory().Value()
	}
	if requested <= guest {
		return 0, false
	}
	return float64(requested - guest), true
}

func boolWord(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
