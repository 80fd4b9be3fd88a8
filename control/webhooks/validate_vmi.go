/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const (
	// arrayLenMax is KubeVirt's limit on disks, volumes, interfaces and networks.
	arrayLenMax = 256
	// maxStrLen bounds serial numbers.
	maxStrLen = 256
	// maxVCPUs is what q35 supports without an IOMMU for x2APIC.
	maxVCPUs = 255
)

var (
	// minRequestMemory is KubeVirt's smallest memory request.
	minRequestMemory = resource.MustParse("1M")
	// minGuestMemory is the smallest guest the launcher starts.
	minGuestMemory = resource.MustParse("16Mi")

	serialRE       = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)
	cpuModelRE     = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	machineTypeRE  = regexp.MustCompile(`^(q35|pc|pc-q35-.+|pc-i440fx-.+)$`)
	machineAllowed = []string{"q35", "pc", "pc-q35-*", "pc-i440fx-*"}
)

// restrictedVMILabels are set by qvirt's components only.
var restrictedVMILabels = map[string]bool{
	v1.CreatedByLabel:               true,
	v1.MigrationJobLabel:            true,
	v1.NodeNameLabel:                true,
	v1.MigrationTargetNodeNameLabel: true,
	"kubevirt.io/schedulable":       true,
	"kubevirt.io/install-strategy":  true,
}

// ValidateVMISpec checks a VMI spec, or a VM's template spec, after defaults
// (SetVMISpecDefaults) have been applied. Paths start at path, "spec" for a VMI.
func ValidateVMISpec(path *field.Path, spec *v1.VirtualMachineInstanceSpec, cfg Config) field.ErrorList {
	var errs field.ErrorList
	devices := path.Child("domain", "devices")
	for _, l := range []struct {
		p *field.Path
		n int
	}{
		{devices.Child("disks"), len(spec.Domain.Devices.Disks)},
		{path.Child("volumes"), len(spec.Volumes)},
		{devices.Child("interfaces"), len(spec.Domain.Devices.Interfaces)},
		{path.Child("networks"), len(spec.Networks)},
		{path.Child("accessCredentials"), len(spec.AccessCredentials)},
	} {
		if l.n > arrayLenMax {
			// KubeVirt stops here: the rest would be quadratic in a hostile list.
			return append(errs, tooMany(l.p, l.n, "%s list exceeds the %d element limit in length", l.p, arrayLenMax))
		}
	}
	errs = append(errs, validateScheduling(path, spec)...)
	errs = append(errs, validateMachine(path, spec)...)
	errs = append(errs, validateCPU(path, spec)...)
	errs = append(errs, validateMemory(path, spec)...)
	errs = append(errs, validateFirmware(path.Child("domain", "firmware"), spec.Domain.Firmware)...)
	errs = append(errs, validateDisks(devices.Child("disks"), spec.Domain.Devices.Disks)...)
	errs = append(errs, validateVolumes(path.Child("volumes"), spec.Volumes, cfg)...)
	errs = append(errs, validateDisksMatchVolumes(path, spec)...)
	errs = append(errs, validateHotplugVolumes(path, spec)...)
	errs = append(errs, validateNetworking(path, spec)...)
	errs = append(errs, validateBootOrder(path, spec)...)
	errs = append(errs, validateAccessCredentials(path.Child("accessCredentials"), spec)...)
	if spec.Domain.Devices.WantsVSOCK() && !cfg.FeatureGateEnabled(FeatureGateVSOCK) {
		errs = append(errs, invalid(devices.Child("autoattachVSOCK"), true, "%s feature gate is not enabled in kubevirt-config", FeatureGateVSOCK))
	}
	errs = append(errs, unsupportedInVMISpec(path, spec)...)
	return errs
}

// ValidateVMIMetadata refuses KubeVirt's reserved labels from anyone but qvirt's
// own components.
func ValidateVMIMetadata(path *field.Path, meta *metav1.ObjectMeta, privileged bool) field.ErrorList {
	reserved := reservedLabels(meta.Labels)
	if privileged || len(reserved) == 0 {
		return nil
	}
	return field.ErrorList{notSupported(path.Child("labels"), slices.Sorted(maps.Keys(reserved)),
		"creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited")}
}

// ValidateVMIUpdate enforces what may change on an existing VMI: only qvirt's
// components may touch its status or the reserved labels, and its spec only as
// hotplug does (validateHotplugUpdate).
func ValidateVMIUpdate(old, new *v1.VirtualMachineInstance, user authenticationv1.UserInfo, priv Privileges) field.ErrorList {
	if priv.Allows(user) {
		if equality.Semantic.DeepEqual(old.Spec, new.Spec) {
			return nil
		}
		return validateHotplugUpdate(field.NewPath("spec"), &old.Spec, &new.Spec)
	}
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(old.Spec, new.Spec) {
		errs = append(errs, notSupported(field.NewPath("spec"), nil, "update of VMI object is restricted"))
	}
	if !equality.Semantic.DeepEqual(reservedLabels(old.Labels), reservedLabels(new.Labels)) {
		errs = append(errs, notSupported(field.NewPath("metadata", "labels"), nil,
			"modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited"))
	}
	if !equality.Semantic.DeepEqual(old.Status, new.Status) {
		errs = append(errs, statusForbidden("VirtualMachineInstance"))
	}
	return errs
}

func statusForbidden(kind string) *field.Error {
	return forbidden(field.NewPath("status"), "the status of a %s is owned by qvirt: only its service accounts may change it", kind)
}

func reservedLabels(labels map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range labels {
		if restrictedVMILabels[k] {
			m[k] = v
		}
	}
	return m
}

func validateScheduling(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.Hostname != "" {
		if msgs := k8svalidation.IsDNS1123Label(spec.Hostname); len(msgs) > 0 {
			p := path.Child("hostname")
			errs = append(errs, invalid(p, spec.Hostname, "%s does not conform to the kubernetes DNS_LABEL rules : %s", p, strings.Join(msgs, ", ")))
		}
	}
	if spec.Subdomain != "" {
		if msgs := k8svalidation.IsDNS1123Subdomain(spec.Subdomain); len(msgs) > 0 {
			p := path.Child("subdomain")
			errs = append(errs, invalid(p, spec.Subdomain, "%s does not conform to the kubernetes DNS_SUBDOMAIN rules : %s", p, strings.Join(msgs, ", ")))
		}
	}
	if s := spec.StartStrategy; s != nil && *s != v1.StartStrategyPaused {
		p := path.Child("startStrategy")
		errs = append(errs, invalid(p, *s, "%s is set with an unrecognized option: %s", p, *s))
	}
	if s := spec.EvictionStrategy; s != nil {
		errs = append(errs, validateEvictionStrategy(path.Child("evictionStrategy"), *s)...)
	}
	switch spec.DNSPolicy {
	case "", corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault:
	case corev1.DNSNone:
		if spec.DNSConfig == nil || len(spec.DNSConfig.Nameservers) == 0 {
			errs = append(errs, required(path.Child("dnsConfig"), "must provide at least one DNS nameserver when `dnsPolicy` is None"))
		}
	default:
		errs = append(errs, notSupported(path.Child("dnsPolicy"), spec.DNSPolicy,
			"DNSPolicy: %s is not supported, valid values: [ClusterFirstWithHostNet ClusterFirst Default None]", spec.DNSPolicy))
	}
	return errs
}

// validateEvictionStrategy accepts KubeVirt's strategies, which virt-api's eviction webhook
// honours (EvictionDecision).
func validateEvictionStrategy(p *field.Path, s v1.EvictionStrategy) field.ErrorList {
	switch s {
	case v1.EvictionStrategyNone, v1.EvictionStrategyLiveMigrate, v1.EvictionStrategyLiveMigrateIfPossible, v1.EvictionStrategyExternal:
		return nil
	}
	return field.ErrorList{invalid(p, s, "%s is set with an unrecognized option: %s", p, s)}
}

func validateMachine(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	m := spec.Domain.Machine
	if m == nil || m.Type == "" || machineTypeRE.MatchString(m.Type) {
		return nil
	}
	p := path.Child("domain", "machine", "type")
	return field.ErrorList{invalid(p, m.Type, "%s is not supported: %s (allowed values: %v)", p, m.Type, machineAllowed)}
}

func validateCPU(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	res := spec.Domain.Resources
	reqP := path.Child("domain", "resources", "requests", "cpu")
	limP := path.Child("domain", "resources", "limits", "cpu")
	req, lim := res.Requests.Cpu(), res.Limits.Cpu()
	if req.Sign() < 0 {
		errs = append(errs, invalid(reqP, req.String(), "%s '%s': must be greater than or equal to 0.", reqP, req))
	}
	if lim.Sign() < 0 {
		errs = append(errs, invalid(limP, lim.String(), "%s '%s': must be greater than or equal to 0.", limP, lim))
	}
	if lim.Sign() > 0 && req.Cmp(*lim) > 0 {
		errs = append(errs, invalid(reqP, req.String(), "%s '%s' is greater than %s '%s'", reqP, req, limP, lim))
	}
	cpu := spec.Domain.CPU
	if cpu == nil {
		return errs
	}
	cpuP := path.Child("domain", "cpu")
	for _, c := range []struct {
		name string
		n    uint32
	}{{"sockets", cpu.Sockets}, {"cores", cpu.Cores}, {"threads", cpu.Threads}} {
		if c.n == 0 {
			p := cpuP.Child(c.name)
			errs = append(errs, invalid(p, c.n, "%s must be greater than 0", p))
		}
	}
	if n := uint64(cpu.Sockets) * uint64(cpu.Cores) * uint64(cpu.Threads); n > maxVCPUs {
		errs = append(errs, invalid(cpuP, n, "%s: sockets*cores*threads must not exceed %d (got %d)", cpuP, maxVCPUs, n))
	}
	if m := cpu.Model; m != "" && m != v1.CPUModeHostModel && m != v1.CPUModeHostPassthrough && !cpuModelRE.MatchString(m) {
		p := cpuP.Child("model")
		errs = append(errs, invalid(p, m, "%s '%s' is not a CPU model name", p, m))
	}
	return errs
}

func validateMemory(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	res := spec.Domain.Resources
	reqP := path.Child("domain", "resources", "requests", "memory")
	limP := path.Child("domain", "resources", "limits", "memory")
	guestP := path.Child("domain", "memory", "guest")
	req, lim := res.Requests.Memory(), res.Limits.Memory()
	switch {
	case req.Sign() < 0:
		errs = append(errs, invalid(reqP, req.String(), "%s '%s': must be greater than or equal to 0.", reqP, req))
	case req.Sign() > 0 && req.Cmp(minRequestMemory) < 0:
		errs = append(errs, invalid(reqP, req.String(), "%s '%s': must be greater than or equal to 1M.", reqP, req))
	}
	if lim.Sign() < 0 {
		errs = append(errs, invalid(limP, lim.String(), "%s '%s': must be greater than or equal to 0.", limP, lim))
	}
	if lim.Sign() > 0 && req.Cmp(*lim) > 0 {
		errs = append(errs, invalid(reqP, req.String(), "%s '%s' is greater than %s '%s'", reqP, req, limP, lim))
	}
	var guest *resource.Quantity
	if spec.Domain.Memory != nil {
		guest = spec.Domain.Memory.Guest
	}
	switch {
	case guest == nil && req.IsZero():
		errs = append(errs, required(reqP, "no memory requested, at least one of '%s' or '%s' must be set", guestP, reqP))
	case guest == nil:
	case guest.Cmp(minGuestMemory) < 0:
		errs = append(errs, invalid(guestP, guest.String(), "%s '%s': qvirt needs at least %s of guest memory", guestP, guest, &minGuestMemory))
	case lim.Sign() > 0 && guest.Cmp(*lim) > 0:
		errs = append(errs, invalid(guestP, guest.String(), "%s '%s' must be equal to or less than the memory limit %s '%s'", guestP, guest, limP, lim))
	}
	return errs
}

func validateFirmware(p *field.Path, fw *v1.Firmware) field.ErrorList {
	if fw == nil {
		return nil
	}
	var errs field.ErrorList
	if fw.UUID != "" {
		if _, err := uuid.Parse(string(fw.UUID)); err != nil {
			up := p.Child("uuid")
			errs = append(errs, invalid(up, fw.UUID, "%s '%s' is not a valid UUID", up, fw.UUID))
		}
	}
	if fw.Serial != "" {
		sp := p.Child("serial")
		if len(fw.Serial) > maxStrLen {
			errs = append(errs, invalid(sp, fw.Serial, "%s must be less than or equal to %d in length, if specified", sp, maxStrLen))
		}
		if !serialRE.MatchString(fw.Serial) {
			errs = append(errs, invalid(sp, fw.Serial, "%s must be made up of the following characters [A-Za-z0-9_.+-], if specified", sp))
		}
	}
	if b := fw.Bootloader; b != nil && b.BIOS != nil && b.EFI != nil {
		bp := p.Child("bootloader")
		errs = append(errs, invalid(bp, nil, "%s has both EFI and BIOS configured, but they are mutually exclusive.", bp))
	}
	return append(errs, validateKernelBoot(p.Child("kernelBoot"), fw.KernelBoot)...)
}

// validateKernelBoot is KubeVirt's rule plus the launcher's: qvirt boots a kernel,
// so an initrd alone is refused.
func validateKernelBoot(p *field.Path, kb *v1.KernelBoot) field.ErrorList {
	if kb == nil {
		return nil
	}
	if kb.Container == nil {
		if kb.KernelArgs != "" {
			return field.ErrorList{invalid(p.Child("kernelArgs"), kb.KernelArgs, "kernel arguments cannot be provided without an external kernel")}
		}
		return nil
	}
	var errs field.ErrorList
	c, cp := kb.Container, p.Child("container")
	if c.Image == "" {
		errs = append(errs, required(cp.Child("image"), "%s must be defined with an image", cp))
	}
	switch {
	case c.KernelPath == "" && c.InitrdPath == "":
		errs = append(errs, required(cp, "%s must be defined with at least one of the following: kernelPath, initrdPath", cp))
	case c.KernelPath == "":
		errs = append(errs, unsupported(cp.Child("kernelPath"), "kernelBoot with an initrd but no kernel: set kernelPath"))
	}
	if c.KernelPath != "" {
		errs = append(errs, validateFilePath(cp.Child("kernelPath"), c.KernelPath)...)
	}
	if c.InitrdPath != "" {
		errs = append(errs, validateFilePath(cp.Child("initrdPath"), c.InitrdPath)...)
	}
	return errs
}

// validateFilePath wants an absolute, clean path to a file in an image.
func validateFilePath(p *field.Path, path string) field.ErrorList {
	if path == "/" {
		return field.ErrorList{invalid(p, path, "%s must not point to root", p)}
	}
	if filepath.Join("/", path) != strings.TrimSuffix(path, "/") {
		return field.ErrorList{invalid(p, path, "%s must be an absolute path to a file without relative components", p)}
	}
	return nil
}
