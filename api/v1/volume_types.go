/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Volume is a named source of guest storage; a disk of the same name shows it
// to the guest.
type Volume struct {
	Name         string `json:"name"`
	VolumeSource `json:",inline"`
}

// VolumeSource is where a volume's data comes from; only one member may be set.
type VolumeSource struct {
	// +optional
	HostDisk *HostDisk `json:"hostDisk,omitempty"`
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// +optional
	CloudInitNoCloud *CloudInitNoCloudSource `json:"cloudInitNoCloud,omitempty"`
	// +optional
	CloudInitConfigDrive *CloudInitConfigDriveSource `json:"cloudInitConfigDrive,omitempty"`
	// +optional
	ContainerDisk *ContainerDiskSource `json:"containerDisk,omitempty"`
	// +optional
	EmptyDisk *EmptyDiskSource `json:"emptyDisk,omitempty"`
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`
	// +optional
	ConfigMap *ConfigMapVolumeSource `json:"configMap,omitempty"`
	// +optional
	Secret *SecretVolumeSource `json:"secret,omitempty"`
	// +optional
	ServiceAccount *ServiceAccountVolumeSource `json:"serviceAccount,omitempty"`
	// MemoryDump is the claim a memory dump of the running guest is written to; it is always
	// hotplugged, by the memorydump subresource.
	// +optional
	MemoryDump *MemoryDumpVolumeSource `json:"memoryDump,omitempty"`
}

// MemoryDumpVolumeSource is a claim that receives memory dumps.
type MemoryDumpVolumeSource struct {
	PersistentVolumeClaimVolumeSource `json:",inline"`
}

// HotplugVolumeSource is what addvolume may attach to a running VMI.
type HotplugVolumeSource struct {
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`
}

// ContainerDiskSource is a disk image shipped in a container image.
type ContainerDiskSource struct {
	Image string `json:"image"`
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// Path is the image file inside the container; the first file under /disk
	// when unset.
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// CloudInitNoCloudSource is cloud-init NoCloud data served as a cidata disk.
type CloudInitNoCloudSource struct {
	// +optional
	UserDataSecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// +optional
	UserData string `json:"userData,omitempty"`
	// +optional
	NetworkDataSecretRef *corev1.LocalObjectReference `json:"networkDataSecretRef,omitempty"`
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`
	// +optional
	NetworkData string `json:"networkData,omitempty"`
}

// CloudInitConfigDriveSource is cloud-init ConfigDrive data served as a config-2 disk.
type CloudInitConfigDriveSource struct {
	// +optional
	UserDataSecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// +optional
	UserData string `json:"userData,omitempty"`
	// +optional
	NetworkDataSecretRef *corev1.LocalObjectReference `json:"networkDataSecretRef,omitempty"`
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`
	// +optional
	NetworkData string `json:"networkData,omitempty"`
}

// EmptyDiskSource is a blank sparse disk that lives as long as the VMI.
type EmptyDiskSource struct {
	Capacity resource.Quantity `json:"capacity"`
}

// HostDiskType says whether a host disk image must already exist.
type HostDiskType string

const (
	// HostDiskExists requires the image at path.
	HostDiskExists HostDiskType = "Disk"
	// HostDiskExistsOrCreate creates a sparse image of capacity when missing.
	HostDiskExistsOrCreate HostDiskType = "DiskOrCreate"
)

// HostDisk is a disk image on the node (feature gate HostDisk).
type HostDisk struct {
	Path string       `json:"path"`
	Type HostDiskType `json:"type"`
	// +optional
	Capacity resource.Quantity `json:"capacity,omitempty"`
	// +optional
	Shared *bool `json:"shared,omitempty"`
}

// PersistentVolumeClaimVolumeSource is a PVC in the VMI's namespace.
type PersistentVolumeClaimVolumeSource struct {
	corev1.PersistentVolumeClaimVolumeSource `json:",inline"`
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}

// DataVolumeSource is the PVC of a CDI DataVolume of the same name.
type DataVolumeSource struct {
	Name string `json:"name"`
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}

// ConfigMapVolumeSource shows a ConfigMap to the guest as a disk.
type ConfigMapVolumeSource struct {
	corev1.LocalObjectReference `json:",inline"`
	// +optional
	Optional *bool `json:"optional,omitempty"`
	// +optional
	VolumeLabel string `json:"volumeLabel,omitempty"`
}

// SecretVolumeSource shows a Secret to the guest as a disk.
type SecretVolumeSource struct {
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// +optional
	Optional *bool `json:"optional,omitempty"`
	// +optional
	VolumeLabel string `json:"volumeLabel,omitempty"`
}

// ServiceAccountVolumeSource shows a service account token to the guest as a disk.
type ServiceAccountVolumeSource struct {
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// IsHotplugged reports a volume attached to the running VM rather than given to it at start:
// a hotpluggable claim, or a memoryDump volume. Launcher pods never carry them.
func (v *Volume) IsHotplugged() bool {
	return (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable) || v.MemoryDump != nil
}

// HotplugClaimName is the claim behind a hotplugged volume, "" for any other volume.
func (v *Volume) HotplugClaimName() string {
	switch {
	case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable:
		return v.PersistentVolumeClaim.ClaimName
	case v.MemoryDump != nil:
		return v.MemoryDump.ClaimName
	}
	return ""
}
