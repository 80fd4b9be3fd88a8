/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes like the API server: case-sensitive, and unknown fields
// are errors. encoding/json alone would accept a field whose case differs.
func decodeStrict(t *testing.T, data []byte, into any) {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("yaml: %v", err)
	}
	strictErrs, err := sigsjson.UnmarshalStrict(js, into)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(strictErrs) > 0 {
		t.Fatalf("fields not modelled or misspelled: %v", strictErrs)
	}
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// roundTrip decodes a manifest strictly into obj, encodes it again and checks
// that every value of the manifest survives under the same key, then decodes the
// output strictly again and compares the objects.
func roundTrip(t *testing.T, name string, obj runtime.Object) {
	t.Helper()
	data := readFixture(t, name)
	decodeStrict(t, data, obj)

	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	js, _ := yaml.YAMLToJSON(data)
	if err := json.Unmarshal(js, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for _, d := range subsetDiff("", want, got) {
		t.Error(d)
	}

	again := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
	decodeStrict(t, out, again)
	if !reflect.DeepEqual(normalise(t, obj), normalise(t, again)) {
		t.Errorf("object changed across encode/decode:\n%s\n%s", out, mustJSON(t, again))
	}
}

// normalise compares through JSON so that equal quantities with different
// cached forms do not differ.
func normalise(t *testing.T, obj any) any {
	var v any
	if err := json.Unmarshal(mustJSON(t, obj), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func mustJSON(t *testing.T, obj any) []byte {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// subsetDiff lists the places where want is not found in got. Zero scalars and
// empty lists may be dropped by omitempty; empty objects may not ("masquerade: {}"
// means something). Strings equal as quantities or durations count as equal.
func subsetDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want object, got %v", path, got)}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var diffs []string
		for _, k := range keys {
			gv, present := g[k]
			if !present {
				if isDroppable(w[k]) {
					continue
				}
				diffs = append(diffs, fmt.Sprintf("%s.%s: lost (got keys %v)", path, k, sortedKeys(g)))
				continue
			}
			diffs = append(diffs, subsetDiff(path+"."+k, w[k], gv)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, w, got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if reflect.DeepEqual(want, got) || equalStrings(want, got) {
			return nil
		}
		return []string{fmt.Sprintf("%s: want %#v, got %#v", path, want, got)}
	}
}

func isDroppable(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case string:
		return v == ""
	case float64:
		return v == 0
	case []any:
		return len(v) == 0
	}
	return false
}

func equalStrings(a, b any) bool {
	as, ok1 := a.(string)
	bs, ok2 := b.(string)
	if !ok1 || !ok2 {
		return false
	}
	if qa, err := resource.ParseQuantity(as); err == nil {
		if qb, err := resource.ParseQuantity(bs); err == nil {
			return qa.Cmp(qb) == 0
		}
	}
	if da, err := time.ParseDuration(as); err == nil {
		if db, err := time.ParseDuration(bs); err == nil {
			return da == db
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestVirtualMachineRoundTrip(t *testing.T) {
	vm := &VirtualMachine{}
	roundTrip(t, "vm-fedora.yaml", vm)

	if rs, err := vm.RunStrategy(); err != nil || rs != RunStrategyRerunOnFailure {
		t.Errorf("run strategy = %q, %v", rs, err)
	}
	tpl := vm.Spec.Template
	if tpl == nil {
		t.Fatal("template not decoded")
	}
	if got := tpl.ObjectMeta.Labels["kubevirt.io/domain"]; got != "vm-fedora" {
		t.Errorf("template label = %q", got)
	}
	spec := tpl.Spec
	if spec.Domain.CPU == nil || spec.Domain.CPU.Cores != 2 || spec.Domain.CPU.Sockets != 1 {
		t.Errorf("cpu = %+v", spec.Domain.CPU)
	}
	if spec.Domain.Memory == nil || spec.Domain.Memory.Guest.String() != "1Gi" {
		t.Errorf("memory = %+v", spec.Domain.Memory)
	}
	if q := spec.Domain.Resources.Limits[corev1.ResourceMemory]; q.Value() != 1536<<20 {
		t.Errorf("memory limit = %s", q.String())
	}
	if q := spec.Domain.Resources.Requests[corev1.ResourceCPU]; q.MilliValue() != 500 {
		t.Errorf("cpu request = %s", q.String())
	}
	if spec.Domain.Machine == nil || spec.Domain.Machine.Type != "q35" {
		t.Errorf("machine = %+v", spec.Domain.Machine)
	}
	if spec.Domain.Firmware == nil || spec.Domain.Firmware.Bootloader == nil || spec.Domain.Firmware.Bootloader.EFI == nil ||
		spec.Domain.Firmware.Bootloader.EFI.SecureBoot == nil || *spec.Domain.Firmware.Bootloader.EFI.SecureBoot {
		t.Errorf("firmware = %+v", spec.Domain.Firmware)
	}
	devs := spec.Domain.Devices
	if len(devs.Disks) != 4 {
		t.Fatalf("disks = %d", len(devs.Disks))
	}
	if d := devs.Disks[0]; d.Name != "containerdisk" || d.Disk == nil || d.Disk.Bus != DiskBusVirtio || d.BootOrder == nil || *d.BootOrder != 1 {
		t.Errorf("disk 0 = %+v", d)
	}
	if d := devs.Disks[3]; d.CDRom == nil || d.CDRom.Bus != DiskBusSATA || d.CDRom.ReadOnly == nil || !*d.CDRom.ReadOnly {
		t.Errorf("cdrom = %+v", d)
	}
	if devs.Rng == nil || devs.AutoattachMemBalloon == nil || *devs.AutoattachMemBalloon {
		t.Errorf("devices = %+v", devs)
	}
	if len(devs.Interfaces) != 1 || devs.Interfaces[0].Masquerade == nil || devs.Interfaces[0].Bridge != nil ||
		len(devs.Interfaces[0].Ports) != 2 || devs.Interfaces[0].Ports[0].Port != 22 {
		t.Errorf("interfaces = %+v", devs.Interfaces)
	}
	if len(spec.Networks) != 1 || spec.Networks[0].Pod == nil {
		t.Errorf("networks = %+v", spec.Networks)
	}
	vols := spec.Volumes
	if len(vols) != 4 {
		t.Fatalf("volumes = %d", len(vols))
	}
	if v := vols[0].ContainerDisk; v == nil || v.Image != "quay.io/containerdisks/fedora:41" || v.Path != "/disk/fedora.qcow2" {
		t.Errorf("containerDisk = %+v", v)
	}
	if v := vols[1].CloudInitNoCloud; v == nil || v.UserData == "" || v.NetworkData == "" {
		t.Errorf("cloudInitNoCloud = %+v", v)
	}
	if v := vols[2].EmptyDisk; v == nil || v.Capacity.Value() != 2<<30 {
		t.Errorf("emptyDisk = %+v", v)
	}
	if v := vols[3].PersistentVolumeClaim; v == nil || v.ClaimName != "install-iso" || !v.ReadOnly {
		t.Errorf("pvc = %+v", v)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 180 {
		t.Errorf("grace = %v", spec.TerminationGracePeriodSeconds)
	}
	if spec.EvictionStrategy == nil || *spec.EvictionStrategy != EvictionStrategyLiveMigrate {
		t.Errorf("eviction = %v", spec.EvictionStrategy)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations = %+v", spec.Tolerations)
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil ||
		len(spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity = %+v", spec.Affinity)
	}
}

func TestVirtualMachineFromVirtctlRoundTrip(t *testing.T) {
	vm := &VirtualMachine{}
	roundTrip(t, "vm-virtctl.yaml", vm)

	if rs, err := vm.RunStrategy(); err != nil || rs != RunStrategyHalted {
		t.Errorf("run strategy = %q, %v", rs, err)
	}
	if vm.Spec.Instancetype == nil || vm.Spec.Instancetype.Name != "u1.medium" {
		t.Errorf("instancetype = %+v", vm.Spec.Instancetype)
	}
	if len(vm.Spec.DataVolumeTemplates) != 1 {
		t.Fatalf("dataVolumeTemplates = %+v", vm.Spec.DataVolumeTemplates)
	}
	dvt := vm.Spec.DataVolumeTemplates[0]
	var dvSpec struct {
		SourceRef struct{ Name string } `json:"sourceRef"`
	}
	if err := json.Unmarshal(dvt.Spec.Raw, &dvSpec); err != nil || dvt.ObjectMeta.Name != "fedora-ds" || dvSpec.SourceRef.Name != "fedora" {
		t.Errorf("dataVolumeTemplate = %s %s (%v)", dvt.ObjectMeta.Name, dvt.Spec.Raw, err)
	}
	if v := vm.Spec.Template.Spec.Volumes[0].DataVolume; v == nil || v.Name != "fedora-ds" {
		t.Errorf("dataVolume volume = %+v", v)
	}
}

func TestVirtualMachineWindowsRoundTrip(t *testing.T) {
	vm := &VirtualMachine{}
	roundTrip(t, "vm-windows.yaml", vm)

	if rs, err := vm.RunStrategy(); err != nil || rs != RunStrategyHalted {
		t.Errorf("run strategy = %q, %v", rs, err)
	}
	d := vm.Spec.Template.Spec.Domain
	if d.Clock == nil || d.Clock.UTC == nil || d.Clock.Timer == nil || d.Clock.Timer.HPET == nil ||
		d.Clock.Timer.HPET.Enabled == nil || *d.Clock.Timer.HPET.Enabled || d.Clock.Timer.RTC.TickPolicy != "catchup" ||
		d.Clock.Timer.Hyperv == nil {
		t.Errorf("clock = %+v", d.Clock)
	}
	hv := d.Features.Hyperv
	if hv == nil || hv.Spinlocks == nil || hv.Spinlocks.Retries == nil || *hv.Spinlocks.Retries != 8191 ||
		hv.SyNICTimer == nil || hv.SyNICTimer.Direct == nil || hv.Relaxed == nil || d.Features.APIC == nil {
		t.Errorf("hyperv = %+v", hv)
	}
	if d.Devices.TPM == nil || d.Devices.TPM.Persistent == nil || !*d.Devices.TPM.Persistent ||
		len(d.Devices.Inputs) != 1 || d.Devices.Inputs[0].Type != "tablet" {
		t.Errorf("devices = %+v", d.Devices)
	}
	if d.Devices.Interfaces[0].Model != "e1000e" || d.Devices.Disks[1].CDRom == nil || d.Devices.Disks[1].CDRom.ReadOnly != nil {
		t.Errorf("interface/cdrom = %+v %+v", d.Devices.Interfaces[0], d.Devices.Disks[1])
	}
}

func TestVirtualMachineInstanceKernelBootRoundTrip(t *testing.T) {
	vmi := &VirtualMachineInstance{}
	roundTrip(t, "vmi-kernel-boot.yaml", vmi)

	fw := vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		t.Fatalf("kernelBoot not decoded: %+v", fw)
	}
	kb := fw.KernelBoot
	if kb.KernelArgs != "console=ttyS0" || kb.Container.KernelPath != "/boot/vmlinuz-virt" ||
		kb.Container.InitrdPath != "/boot/initramfs-virt" || kb.Container.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("kernelBoot = %+v container %+v", kb, kb.Container)
	}
	if vmi.Spec.TerminationGracePeriodSeconds == nil || *vmi.Spec.TerminationGracePeriodSeconds != 0 {
		t.Errorf("explicit zero grace period lost: %v", vmi.Spec.TerminationGracePeriodSeconds)
	}
}

func TestVirtualMachineInstanceStatusRoundTrip(t *testing.T) {
	vmi := &VirtualMachineInstance{}
	roundTrip(t, "vmi-running.yaml", vmi)

	st := vmi.Status
	if st.Phase != Running || st.NodeName != "node01" || st.QOSClass == nil || *st.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("status = %+v", st)
	}
	if len(st.Interfaces) != 1 || st.Interfaces[0].IP != "10.244.0.23" || len(st.Interfaces[0].IPs) != 2 ||
		st.Interfaces[0].InterfaceName != "eth0" {
		t.Errorf("interfaces = %+v", st.Interfaces)
	}
	if len(st.Conditions) != 3 || st.Conditions[1].Type != VirtualMachineInstanceIsMigratable ||
		st.Conditions[0].Status != corev1.ConditionTrue || st.Conditions[0].LastTransitionTime.IsZero() {
		t.Errorf("conditions = %+v", st.Conditions)
	}
	if st.ActivePods["3c1a6e27-8f0b-4a55-a5a2-0c9e6b2a4d10"] != "node01" {
		t.Errorf("activePods = %v", st.ActivePods)
	}
	ms := st.MigrationState
	if ms == nil || ms.TargetNodeAddress != "10.0.0.12" || ms.MigrationUID != "7d0f0e7e-2b8a-4b57-9d8c-6f5f8e9a1b2c" ||
		ms.AbortStatus != MigrationAbortInProgress || !ms.AbortRequested || ms.StartTimestamp == nil ||
		ms.TargetDirectMigrationNodePorts["46313"] != 49152 {
		t.Errorf("migrationState = %+v", ms)
	}
	if st.GuestOSInfo.VersionID != "41" || st.Machine == nil || st.Machine.Type != "pc-q35-9.1" {
		t.Errorf("guestOSInfo = %+v machine = %+v", st.GuestOSInfo, st.Machine)
	}
	if st.Memory == nil || st.Memory.GuestCurrent == nil || st.CurrentCPUTopology == nil || len(st.VolumeStatus) != 2 ||
		len(st.PhaseTransitionTimestamps) != 4 {
		t.Errorf("status = %+v", st)
	}
}

func TestMigrationRoundTrip(t *testing.T) {
	m := &VirtualMachineInstanceMigration{}
	roundTrip(t, "vmim.yaml", m)

	if m.Spec.VMIName != "vm-fedora" || m.Spec.AddedNodeSelector["topology.kubernetes.io/zone"] != "b" {
		t.Errorf("spec = %+v", m.Spec)
	}
	if m.Labels[MigrationSelectorLabel] != "vm-fedora" {
		t.Errorf("labels = %v", m.Labels)
	}
	if m.Status.Phase != MigrationSucceeded || len(m.Status.PhaseTransitionTimestamps) != 7 ||
		m.Status.PhaseTransitionTimestamps[4].Phase != MigrationTargetReady {
		t.Errorf("status = %+v", m.Status)
	}
	if len(m.Status.Conditions) != 1 || m.Status.Conditions[0].Type != VirtualMachineInstanceMigrationAbortRequested {
		t.Errorf("conditions = %+v", m.Status.Conditions)
	}
	if ms := m.Status.MigrationState; ms == nil || !ms.Completed || !ms.TargetNodeDomainDetected || ms.EndTimestamp == nil {
		t.Errorf("migrationState = %+v", ms)
	}
}

func TestKubeVirtRoundTrip(t *testing.T) {
	kv := &KubeVirt{}
	roundTrip(t, "kubevirt-cr.yaml", kv)

	cfg := kv.Spec.Configuration
	dev := cfg.DeveloperConfiguration
	if dev == nil || !dev.UseEmulation || !reflect.DeepEqual(dev.FeatureGates, []string{"HostDisk", "Snapshot"}) ||
		!reflect.DeepEqual(dev.DisabledFeatureGates, []string{"VMLiveUpdateFeatures"}) {
		t.Errorf("developerConfiguration = %+v", dev)
	}
	mig := cfg.MigrationConfiguration
	if mig == nil || mig.ParallelMigrationsPerCluster == nil || *mig.ParallelMigrationsPerCluster != 5 ||
		mig.ParallelOutboundMigrationsPerNode == nil || *mig.ParallelOutboundMigrationsPerNode != 2 ||
		mig.BandwidthPerMigration == nil || mig.BandwidthPerMigration.Value() != 64<<20 ||
		mig.ProgressTimeout == nil || *mig.ProgressTimeout != 150 {
		t.Errorf("migrations = %+v", mig)
	}
	tb := func(c *ReloadableComponentConfiguration) *TokenBucketRateLimiter {
		if c == nil || c.RestClient == nil || c.RestClient.RateLimiter == nil {
			return nil
		}
		return c.RestClient.RateLimiter.TokenBucketRateLimiter
	}
	if l := tb(cfg.APIConfiguration); l == nil || l.QPS != 30 || l.Burst != 50 {
		t.Errorf("api rate limiter = %+v", l)
	}
	if l := tb(cfg.HandlerConfiguration); l == nil || l.QPS != 5.5 || l.Burst != 10 {
		t.Errorf("handler rate limiter = %+v", l)
	}
	if kv.Spec.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy = %q", kv.Spec.ImagePullPolicy)
	}
}

func TestKubeVirtCertificatesRoundTrip(t *testing.T) {
	kv := &KubeVirt{}
	roundTrip(t, "kubevirt-certs.yaml", kv)

	ss := kv.Spec.CertificateRotationStrategy.SelfSigned
	if ss == nil || ss.CA == nil || ss.CA.Duration == nil || ss.CA.Duration.Duration != 7*24*time.Hour ||
		ss.Server == nil || ss.Server.RenewBefore == nil || ss.Server.RenewBefore.Duration != 4*time.Hour+48*time.Minute {
		t.Errorf("selfSigned = %+v", ss)
	}
	if kv.Status.Phase != KubeVirtPhaseDeployed || len(kv.Status.Conditions) != 1 {
		t.Errorf("status = %+v", kv.Status)
	}
}

// The strict decoder must refuse what KubeVirt would not accept either, or the
// round-trip tests prove nothing.
func TestDecodeStrictRefusesUnknownAndMiscasedFields(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":  "spec:\n  domain:\n    devices: {}\n    noSuchField: 1\n",
		"wrong case":     "spec:\n  domain:\n    devices: {}\n  terminationgraceperiodseconds: 3\n",
		"unknown volume": "spec:\n  domain:\n    devices: {}\n  volumes:\n  - name: a\n    containerdisk:\n      image: x\n",
	} {
		t.Run(name, func(t *testing.T) {
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			strictErrs, err := sigsjson.UnmarshalStrict(js, &VirtualMachineInstance{})
			if err == nil && len(strictErrs) == 0 {
				t.Errorf("accepted %q", doc)
			}
		})
	}
}

func TestSubsetDiffDetectsLostAndRenamedFields(t *testing.T) {
	want := map[string]any{"a": map[string]any{"masquerade": map[string]any{}, "x": "1Gi", "l": []any{}}}
	if d := subsetDiff("", want, map[string]any{"a": map[string]any{"x": "1024Mi"}}); len(d) != 1 {
		t.Errorf("a dropped empty object must be reported once, got %v", d)
	}
	if d := subsetDiff("", want, map[string]any{"a": map[string]any{"masquerade": map[string]any{}, "x": "1Gi"}}); len(d) != 0 {
		t.Errorf("unexpected diffs %v", d)
	}
	if d := subsetDiff("", map[string]any{"vmiName": "a"}, map[string]any{"vminame": "a"}); len(d) != 1 {
		t.Errorf("renamed key must be reported, got %v", d)
	}
}
