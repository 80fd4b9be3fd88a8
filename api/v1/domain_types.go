/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// DomainSpec is the virtual hardware of a VMI.
type DomainSpec struct {
	// Resources are the launcher pod's requests and limits; memory also sizes the
	// guest when memory.guest is unset.
	// +optional
	Resources ResourceRequirements `json:"resources,omitempty"`
	// +optional
	CPU *CPU `json:"cpu,omitempty"`
	// +optional
	Memory *Memory `json:"memory,omitempty"`
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// +optional
	Firmware *Firmware `json:"firmware,omitempty"`
	// +optional
	Clock *Clock `json:"clock,omitempty"`
	// +optional
	Features *Features `json:"features,omitempty"`
	Devices  Devices   `json:"devices"`
}

// ResourceRequirements are compute resources; valid keys are cpu and memory.
type ResourceRequirements struct {
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
	// OvercommitGuestOverhead leaves the launcher overhead out of the pod requests.
	// +optional
	OvercommitGuestOverhead bool `json:"overcommitGuestOverhead,omitempty"`
}

// CPU is the vCPU topology and model.
type CPU struct {
	// +optional
	Cores uint32 `json:"cores,omitempty"`
	// +optional
	Sockets uint32 `json:"sockets,omitempty"`
	// +optional
	MaxSockets uint32 `json:"maxSockets,omitempty"`
	// +optional
	Threads uint32 `json:"threads,omitempty"`
	// Model is a QEMU CPU model, host-passthrough or host-model.
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	Features []CPUFeature `json:"features,omitempty"`
	// +optional
	DedicatedCPUPlacement bool `json:"dedicatedCpuPlacement,omitempty"`
	// +optional
	IsolateEmulatorThread bool `json:"isolateEmulatorThread,omitempty"`
}

// Special CPU model names.
const (
	CPUModeHostPassthrough = "host-passthrough"
	CPUModeHostModel       = "host-model"
)

// CPUFeature switches one CPU flag.
type CPUFeature struct {
	Name string `json:"name"`
	// Policy is one of force, require, optional, disable, forbid.
	// +optional
	Policy string `json:"policy,omitempty"`
}

// Memory is the guest memory.
type Memory struct {
	// +optional
	Hugepages *Hugepages `json:"hugepages,omitempty"`
	// Guest is the memory the guest sees; defaults to the memory request.
	// +optional
	Guest *resource.Quantity `json:"guest,omitempty"`
	// +optional
	MaxGuest *resource.Quantity `json:"maxGuest,omitempty"`
}

// Hugepages backs guest memory with huge pages.
type Hugepages struct {
	// +optional
	PageSize string `json:"pageSize,omitempty"`
}

// Machine is the QEMU machine type.
type Machine struct {
	// +optional
	Type string `json:"type"`
}

// Firmware is what the guest boots with.
type Firmware struct {
	// UUID is the SMBIOS system UUID; generated when unset.
	// +optional
	UUID types.UID `json:"uuid,omitempty"`
	// +optional
	Bootloader *Bootloader `json:"bootloader,omitempty"`
	// Serial is the SMBIOS system serial number.
	// +optional
	Serial string `json:"serial,omitempty"`
	// +optional
	KernelBoot *KernelBoot `json:"kernelBoot,omitempty"`
}

// Bootloader picks BIOS or EFI; only one may be set.
type Bootloader struct {
	// +optional
	BIOS *BIOS `json:"bios,omitempty"`
	// +optional
	EFI *EFI `json:"efi,omitempty"`
}

// BIOS boots with SeaBIOS (the default).
type BIOS struct {
	// +optional
	UseSerial *bool `json:"useSerial,omitempty"`
}

// EFI boots with OVMF.
type EFI struct {
	// +optional
	SecureBoot *bool `json:"secureBoot,omitempty"`
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// KernelBoot boots a kernel and initrd taken from a container image.
type KernelBoot struct {
	// +optional
	KernelArgs string `json:"kernelArgs,omitempty"`
	// +optional
	Container *KernelBootContainer `json:"container,omitempty"`
}

// KernelBootContainer is the image holding the kernel and initrd.
type KernelBootContainer struct {
	Image string `json:"image"`
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// +optional
	KernelPath string `json:"kernelPath,omitempty"`
	// +optional
	InitrdPath string `json:"initrdPath,omitempty"`
}

// Clock is the guest clock offset and timers.
type Clock struct {
	ClockOffset `json:",inline"`
	// +optional
	Timer *Timer `json:"timer,omitempty"`
}

// ClockOffset sets the guest clock; exactly one member is set.
type ClockOffset struct {
	// +optional
	UTC *ClockOffsetUTC `json:"utc,omitempty"`
	// +optional
	Timezone *ClockOffsetTimezone `json:"timezone,omitempty"`
}

// ClockOffsetUTC starts the guest clock at UTC plus an offset.
type ClockOffsetUTC struct {
	// +optional
	OffsetSeconds *int `json:"offsetSeconds,omitempty"`
}

// ClockOffsetTimezone is a TZ name such as Europe/Paris.
type ClockOffsetTimezone string

// Timer lists the guest timers.
type Timer struct {
	// +optional
	HPET *HPETTimer `json:"hpet,omitempty"`
	// +optional
	KVM *KVMTimer `json:"kvm,omitempty"`
	// +optional
	PIT *PITTimer `json:"pit,omitempty"`
	// +optional
	RTC *RTCTimer `json:"rtc,omitempty"`
	// +optional
	Hyperv *HypervTimer `json:"hyperv,omitempty"`
}

// HPETTimer is the high precision event timer. KubeVirt names the on/off switch
// "present" on timers.
type HPETTimer struct {
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// PITTimer is the programmable interval timer.
type PITTimer struct {
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// RTCTimer is the real time clock.
type RTCTimer struct {
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// +optional
	Enabled *bool `json:"present,omitempty"`
	// Track is guest or wall.
	// +optional
	Track string `json:"track,omitempty"`
}

// KVMTimer is the paravirtual KVM clock.
type KVMTimer struct {
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// HypervTimer is the Hyper-V reference clock.
type HypervTimer struct {
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// Features are machine features; acpi is on unless disabled.
type Features struct {
	// +optional
	ACPI FeatureState `json:"acpi,omitempty"`
	// +optional
	APIC *FeatureAPIC `json:"apic,omitempty"`
	// +optional
	Hyperv *FeatureHyperv `json:"hyperv,omitempty"`
	// +optional
	SMM *FeatureState `json:"smm,omitempty"`
	// +optional
	KVM *FeatureKVM `json:"kvm,omitempty"`
	// +optional
	Pvspinlock *FeatureState `json:"pvspinlock,omitempty"`
}

// FeatureState turns a feature on or off; an empty object means on.
type FeatureState struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// FeatureAPIC configures the APIC.
type FeatureAPIC struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	EndOfInterrupt bool `json:"endOfInterrupt,omitempty"`
}

// FeatureKVM controls how KVM shows itself to the guest.
type FeatureKVM struct {
	// +optional
	Hidden bool `json:"hidden,omitempty"`
}

// FeatureHyperv are the Hyper-V enlightenments Windows guests use.
type FeatureHyperv struct {
	// +optional
	Relaxed *FeatureState `json:"relaxed,omitempty"`
	// +optional
	VAPIC *FeatureState `json:"vapic,omitempty"`
	// +optional
	Spinlocks *FeatureSpinlocks `json:"spinlocks,omitempty"`
	// +optional
	VPIndex *FeatureState `json:"vpindex,omitempty"`
	// +optional
	Runtime *FeatureState `json:"runtime,omitempty"`
	// +optional
	SyNIC *FeatureState `json:"synic,omitempty"`
	// +optional
	SyNICTimer *SyNICTimer `json:"synictimer,omitempty"`
	// +optional
	Reset *FeatureState `json:"reset,omitempty"`
	// +optional
	VendorID *FeatureVendorID `json:"vendorid,omitempty"`
	// +optional
	Frequencies *FeatureState `json:"frequencies,omitempty"`
	// +optional
	Reenlightenment *FeatureState `json:"reenlightenment,omitempty"`
	// +optional
	TLBFlush *TLBFlush `json:"tlbflush,omitempty"`
	// +optional
	IPI *FeatureState `json:"ipi,omitempty"`
	// +optional
	EVMCS *FeatureState `json:"evmcs,omitempty"`
}

// FeatureSpinlocks sets the spinlock retry count.
type FeatureSpinlocks struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Retries *uint32 `json:"spinlocks,omitempty"`
}

// FeatureVendorID sets the hypervisor vendor id seen by the guest.
type FeatureVendorID struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	VendorID string `json:"vendorid,omitempty"`
}

// SyNICTimer enables the synthetic timers.
type SyNICTimer struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
}

// TLBFlush enables paravirtual TLB flushes.
type TLBFlush struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
	// +optional
	Extended *FeatureState `json:"extended,omitempty"`
}
