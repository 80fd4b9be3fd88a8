/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"encoding/base64"
	"fmt"
)

// samples are the values a field is tried with, where the generic ones of its type (see
// genericSamples) would be refused as malformed or miss the values that matter: every value of a
// closed set, and well-formed names, paths, addresses. For a required field the first value is
// the one it has when the others are tried.
var samples = map[string][]any{
	"spec.architecture":                                              {"amd64", "arm64", "s390x"},
	"spec.evictionStrategy":                                          {"None", "LiveMigrate", "LiveMigrateIfPossible", "External"},
	"spec.startStrategy":                                             {"Paused"},
	"spec.dnsPolicy":                                                 {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"},
	"spec.domain.machine.type":                                       {"q35", "pc", "pc-q35-rhel9.6.0", "pc-i440fx-rhel7.6.0"},
	"spec.domain.cpu.model":                                          {"host-model", "host-passthrough", "Haswell-noTSX"},
	"spec.domain.memory.guest":                                       {"128Mi"},
	"spec.domain.memory.hugepages.pageSize":                          {"2Mi"},
	"spec.domain.clock.timezone":                                     {"Europe/Paris"},
	"spec.domain.firmware.uuid":                                      {"5d307ca9-b3ef-428c-8861-06e72d69f223"},
	"spec.domain.firmware.kernelBoot.container.image":                {"registry.example/kernel:1", "registry.example/kernel:2"},
	"spec.domain.firmware.kernelBoot.container.kernelPath":           {"/boot/vmlinuz-lts"},
	"spec.domain.firmware.kernelBoot.container.initrdPath":           {"/boot/initrd"},
	"spec.domain.firmware.kernelBoot.container.imagePullPolicy":      {"Always", "IfNotPresent", "Never"},
	"spec.domain.resources.requests":                                 {map[string]any{"cpu": "2"}, map[string]any{"memory": "128Mi"}, map[string]any{"nvidia.com/gpu": "1"}},
	"spec.domain.resources.limits":                                   {map[string]any{"cpu": "2"}, map[string]any{"memory": "128Mi"}, map[string]any{"nvidia.com/gpu": "1"}},
	"spec.domain.devices.disks[].name":                               {"extra", "other"},
	"spec.domain.devices.disks[].disk.bus":                           {"virtio", "sata", "scsi", "usb"},
	"spec.domain.devices.disks[].cdrom.bus":                          {"sata", "scsi", "virtio", "usb"},
	"spec.domain.devices.disks[].lun.bus":                            {"scsi"},
	"spec.domain.devices.disks[].cdrom.tray":                         {"closed", "open"},
	"spec.domain.devices.disks[].cache":                              {"none", "writethrough", "writeback"},
	"spec.domain.devices.disks[].io":                                 {"native", "threads"},
	"spec.domain.devices.disks[].errorPolicy":                        {"stop", "ignore", "report", "enospace"},
	"spec.domain.devices.disks[].disk.pciAddress":                    {"0000:81:01.0"},
	"spec.domain.devices.interfaces[].name":                          {"extra", "other"},
	"spec.domain.devices.interfaces[].model":                         {"virtio", "e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139"},
	"spec.domain.devices.interfaces[].state":                         {"up", "down", "absent"},
	"spec.domain.devices.interfaces[].macAddress":                    {"02:6b:8e:00:00:2a"},
	"spec.domain.devices.interfaces[].pciAddress":                    {"0000:81:00.1"},
	"spec.domain.devices.interfaces[].ports[].name":                  {"http"},
	"spec.domain.devices.interfaces[].ports[].port":                  {80, 8080},
	"spec.domain.devices.interfaces[].ports[].protocol":              {"TCP", "UDP"},
	"spec.domain.devices.inputs[].bus":                               {"usb", "virtio"},
	"spec.domain.devices.inputs[].type":                              {"tablet", "keyboard"},
	"spec.domain.devices.watchdog.i6300esb.action":                   {"poweroff", "reset", "shutdown"},
	"spec.networks[].name":                                           {"extra", "other"},
	"spec.networks[].pod.vmNetworkCIDR":                              {"10.11.0.0/24"},
	"spec.networks[].pod.vmIPv6NetworkCIDR":                          {"fd10:0:2::/120", "fd10:11::/120"},
	"spec.volumes[].name":                                            {"extra", "other"},
	"spec.accessCredentials[].sshPublicKey.source.secret.secretName": {"my-keys", "other-keys"},
	"spec.accessCredentials[].userPassword.source.secret.secretName": {"my-passwords", "other-passwords"},
	"spec.volumes[].containerDisk.image":                             {"registry.example/disk:1", "registry.example/disk:2"},
	"spec.volumes[].containerDisk.path":                              {"/disk/other.qcow2"},
	"spec.volumes[].containerDisk.imagePullPolicy":                   {"Always", "IfNotPresent", "Never"},
	"spec.volumes[].emptyDisk.capacity":                              {"1Gi", "2Gi"},
	"spec.volumes[].hostDisk.type":                                   {"DiskOrCreate", "Disk"},
	"spec.volumes[].hostDisk.path":                                   {"/var/lib/images/a.img", "/var/lib/images/b.img"},
	"spec.volumes[].hostDisk.capacity":                               {"2Gi"},
	"spec.volumes[].cloudInitNoCloud.userDataBase64":                 {base64.StdEncoding.EncodeToString([]byte("#cloud-config\nhostname: b64\n"))},
	"spec.volumes[].cloudInitNoCloud.networkDataBase64":              {base64.StdEncoding.EncodeToString([]byte("version: 2\n"))},
	"spec.volumes[].cloudInitConfigDrive.userDataBase64":             {base64.StdEncoding.EncodeToString([]byte("#cloud-config\n"))},
	"spec.volumes[].cloudInitConfigDrive.networkDataBase64":          {base64.StdEncoding.EncodeToString([]byte("version: 2\n"))},
}

// genericSamples are a type's values for fields without entries in samples: two for a required
// field (the first is kept while the second is tried), else what differs from leaving it out.
func genericSamples(s *schema, required bool) []any {
	switch {
	case s.IntOrString:
		return pick(required, "1Gi", "2Gi")
	case s.mapValues() != nil:
		return []any{map[string]any{"x": genericSamples(s.mapValues(), false)[0]}}
	}
	switch s.Type {
	case "boolean":
		return []any{true, false}
	case "integer", "number":
		return pick(required, 1, 2)
	case "string":
		return pick(required, "x", "y")
	case "object":
		if s.PreserveUnknown {
			return []any{map[string]any{"x": "y"}}
		}
		return []any{map[string]any{}}
	}
	panic(fmt.Sprintf("no sample for schema type %q", s.Type))
}

func pick(required bool, a, b any) []any {
	if required {
		return []any{a, b}
	}
	return []any{b}
}

// sameAsUnset are values that are accepted and must change nothing, because they say what
// leaving the field out says: KubeVirt's defaults, which its virtctl and common manifests write
// out, and what qvirt does anyway. Each value is checked to be accepted without effect.
var sameAsUnset = map[string]map[string]string{
	"spec.architecture": {"amd64": "the only architecture, and the default"},
	"spec.domain.machine.type": {
		"q35":              "the default",
		"pc-q35-rhel9.6.0": "a versioned q35, as KubeVirt templates write it, runs as q35",
	},
	"spec.domain.cpu.model": {
		"host-model":       "KubeVirt's default model: qvirt gives the guest the host's CPU (KVM) or QEMU's max (emulation)",
		"host-passthrough": "what qvirt gives the guest anyway: the host's CPU (KVM) or QEMU's max (emulation)",
	},
	"spec.domain.cpu.dedicatedCpuPlacement":          {"false": "KubeVirt's default"},
	"spec.domain.cpu.isolateEmulatorThread":          {"false": "KubeVirt's default"},
	"spec.domain.resources.overcommitGuestOverhead":  {"false": "KubeVirt's default"},
	"spec.domain.features.acpi.enabled":              {"true": "KubeVirt's default"},
	"spec.domain.features.apic.enabled":              {"true": "the APIC is always on"},
	"spec.domain.features.apic.endOfInterrupt":       {"false": "KubeVirt's default"},
	"spec.domain.firmware.bootloader.bios.useSerial": {"false": "KubeVirt's default"},
	"spec.domain.devices.autoattachGraphicsDevice":   {"true": "KubeVirt's default"},
	"spec.domain.devices.autoattachSerialConsole":    {"true": "KubeVirt's default"},
	"spec.domain.devices.autoattachMemBalloon":       {"true": "KubeVirt's default"},
	"spec.domain.devices.autoattachPodInterface":     {"true": "KubeVirt's default"},
	"spec.domain.devices.autoattachInputDevice":      {"false": "KubeVirt's default"},
	"spec.domain.devices.autoattachVSOCK":            {"false": "KubeVirt's default"},
	"spec.domain.devices.blockMultiQueue":            {"false": "KubeVirt's default"},
	"spec.domain.devices.networkInterfaceMultiqueue": {"false": "KubeVirt's default"},
	"spec.domain.devices.useVirtioTransitional":      {"false": "KubeVirt's default"},
	"spec.domain.devices.logSerialConsole":           {"false": "qvirt never copies the serial console to the pod log"},
	"spec.domain.devices.disableHotplug": {
		"false": "KubeVirt's default",
	},
	"spec.domain.devices.disks[].disk.bus":                                   {"sata": "the amd64 default bus"},
	"spec.domain.devices.disks[].disk.readonly":                              {"false": "KubeVirt's default"},
	"spec.domain.devices.disks[].cdrom.bus":                                  {"sata": "the amd64 default bus"},
	"spec.domain.devices.disks[].cdrom.readonly":                             {"true": "KubeVirt's default"},
	"spec.domain.devices.disks[].cdrom.tray":                                 {"closed": "KubeVirt's default"},
	"spec.domain.devices.disks[].dedicatedIOThread":                          {"false": "KubeVirt's default"},
	"spec.domain.devices.disks[].shareable":                                  {"false": "KubeVirt's default"},
	"spec.domain.devices.interfaces[].model":                                 {"virtio": "the default model"},
	"spec.domain.devices.interfaces[].state":                                 {"up": "the default state"},
	"spec.volumes[].containerDisk.imagePullPolicy":                           {"IfNotPresent": "the default for a tagged image"},
	"spec.volumes[].hostDisk.shared":                                         {"false": "KubeVirt's default"},
	"spec.volumes[].persistentVolumeClaim.readOnly":                          {"false": "the Kubernetes default"},
	"spec.volumes[].persistentVolumeClaim.hotpluggable":                      {"false": "KubeVirt's default"},
	"spec.accessCredentials[].userPassword.propagationMethod.qemuGuestAgent": {"{}": "the one method passwords have, which the webhook requires (the test's context writes it when left out)"},
	"spec.networks[].pod.vmIPv6NetworkCIDR":                                  {"fd10:0:2::/120": "KubeVirt's default; the masquerade binding gives the guest no IPv6 either way"},
	"spec.volumes[].memoryDump.readOnly":                                     {"false": "the Kubernetes default; a read-only one is refused"},
	"spec.volumes[].memoryDump.hotpluggable": {
		"true":  "a memoryDump volume is always hotplugged, which the VM controller writes out",
		"false": "a memoryDump volume is hotplugged all the same: it never reaches the launcher pod",
	},
}

// actedOnElsewhere are fields that change nothing the test renders but are honoured by another
// part of qvirt. Each one must still be accepted without effect on what the test renders, or
// it belongs in none of these lists.
var actedOnElsewhere = map[string]string{
	"spec.domain.devices.interfaces[].bridge":           "the node agent's bridge binding (node/podnet)",
	"spec.domain.devices.interfaces[].masquerade":       "the node agent's masquerade binding (node/podnet)",
	"spec.domain.devices.interfaces[].ports[].port":     "the ports the masquerade binding forwards (node/podnet)",
	"spec.domain.devices.interfaces[].ports[].protocol": "the protocol of a forwarded port (node/podnet)",
	"spec.domain.devices.interfaces[].ports[].name":     "a label of the port, checked to be unique and well-formed; KubeVirt does no more with it",
	"spec.networks[].pod.vmNetworkCIDR":                 "the subnet of the masquerade binding's gateway and guest (node/podnet)",
	"spec.evictionStrategy":                             "virt-api's eviction webhook and virt-controller's evacuation (control/webhooks EvictionDecision)",
}

// attachedAtRunTime are fields of hotplugged volumes that by design change nothing the launcher
// pod or QEMU starts with: virt-handler attaches them to the running VM (an attachment pod holds
// the claim on the VMI's node, QEMU gets the disk over QMP). Each one must still be accepted
// without effect on what the test renders.
var attachedAtRunTime = map[string]string{
	"spec.volumes[].memoryDump.claimName": "the claim virt-handler attaches to the running VM for QEMU to write a memory dump into (node/handler)",
}

// knownGaps are fields accepted without effect that are yet to be acted on or refused; the test
// logs them, and fails once one of them is, so that the entry goes. The list is meant to shrink.
var knownGaps = map[string]string{}

// vmOnly are the VM's own fields outside its template, acted on by the VM controller.
var vmOnly = map[string]string{
	"spec.running":     "the deprecated run strategy: the VM controller starts and stops the VMI",
	"spec.runStrategy": "the VM controller starts and stops the VMI by it",
}
