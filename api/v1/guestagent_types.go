package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The answers of virtualmachineinstances/{name}/guestosinfo, userlist and filesystemlist, as
// KubeVirt's: what the guest agent reports.

// VirtualMachineInstanceGuestAgentInfo is the answer of guestosinfo.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceGuestAgentInfo struct {
	metav1.TypeMeta   `json:",inline"`
	GAVersion         string                               `json:"guestAgentVersion,omitempty"`
	SupportedCommands []GuestAgentCommandInfo              `json:"supportedCommands,omitempty"`
	Hostname          string                               `json:"hostname,omitempty"`
	OS                VirtualMachineInstanceGuestOSInfo    `json:"os,omitempty"`
	Timezone          string                               `json:"timezone,omitempty"`
	UserList          []VirtualMachineInstanceGuestOSUser  `json:"userList,omitempty"`
	FSInfo            VirtualMachineInstanceFileSystemInfo `json:"fsInfo,omitempty"`
	FSFreezeStatus    string                               `json:"fsFreezeStatus,omitempty"`
}

// GuestAgentCommandInfo is one command the guest agent offers.
// +kubebuilder:object:generate=false
type GuestAgentCommandInfo struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled,omitempty"`
}

// VirtualMachineInstanceGuestOSUserList is the answer of userlist.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceGuestOSUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceGuestOSUser `json:"items"`
}

// VirtualMachineInstanceGuestOSUser is a user logged in to the guest.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceGuestOSUser struct {
	UserName  string  `json:"userName"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"loginTime,omitempty"`
}

// VirtualMachineInstanceFileSystemInfo lists the guest's filesystems in guestosinfo.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceFileSystemInfo struct {
	Filesystems []VirtualMachineInstanceFileSystem `json:"disks"`
}

// VirtualMachineInstanceFileSystemList is the answer of filesystemlist.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceFileSystemList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceFileSystem `json:"items"`
}

// VirtualMachineInstanceFileSystem is one mounted filesystem of the guest.
// +kubebuilder:object:generate=false
type VirtualMachineInstanceFileSystem struct {
	DiskName       string `json:"diskName"`
	MountPoint     string `json:"mountPoint"`
	FileSystemType string `json:"fileSystemType"`
	UsedBytes      int    `json:"usedBytes"`
	TotalBytes     int    `json:"totalBytes"`
}
