/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

// Devices are the guest's devices. The autoattach flags default to true except
// autoattachInputDevice and autoattachVSOCK.
type Devices struct {
	// +optional
	UseVirtioTransitional *bool `json:"useVirtioTransitional,omitempty"`
	// +optional
	DisableHotplug bool `json:"disableHotplug,omitempty"`
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Disks []Disk `json:"disks,omitempty"`
	// +optional
	Watchdog *Watchdog `json:"watchdog,omitempty"`
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Interfaces []Interface `json:"interfaces,omitempty"`
	// +optional
	Inputs []Input `json:"inputs,omitempty"`
	// +optional
	AutoattachPodInterface *bool `json:"autoattachPodInterface,omitempty"`
	// AutoattachGraphicsDevice false means no VNC.
	// +optional
	AutoattachGraphicsDevice *bool `json:"autoattachGraphicsDevice,omitempty"`
	// AutoattachSerialConsole false means no serial console.
	// +optional
	AutoattachSerialConsole *bool `json:"autoattachSerialConsole,omitempty"`
	// +optional
	LogSerialConsole *bool `json:"logSerialConsole,omitempty"`
	// +optional
	AutoattachMemBalloon *bool `json:"autoattachMemBalloon,omitempty"`
	// +optional
	AutoattachInputDevice *bool `json:"autoattachInputDevice,omitempty"`
	// +optional
	AutoattachVSOCK *bool `json:"autoattachVSOCK,omitempty"`
	// Rng adds a virtio-rng device fed from the host.
	// +optional
	Rng *Rng `json:"rng,omitempty"`
	// +optional
	BlockMultiQueue *bool `json:"blockMultiQueue,omitempty"`
	// +optional
	NetworkInterfaceMultiQueue *bool `json:"networkInterfaceMultiqueue,omitempty"`
	// +optional
	TPM *TPMDevice `json:"tpm,omitempty"`
}

// Rng is a virtio random number generator.
type Rng struct{}

// TPMDevice is an emulated TPM.
type TPMDevice struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// Disk attaches the volume of the same name to the guest.
type Disk struct {
	// Name must match a volume.
	Name string `json:"name"`
	// DiskDevice picks disk, lun or cdrom; disk when none is set.
	DiskDevice `json:",inline"`
	// BootOrder > 0; lower boots first; devices without one are not booted from
	// when any device has one.
	// +optional
	BootOrder *uint `json:"bootOrder,omitempty"`
	// +optional
	Serial string `json:"serial,omitempty"`
	// +optional
	DedicatedIOThread *bool `json:"dedicatedIOThread,omitempty"`
	// Cache is none, writethrough or writeback.
	// +optional
	Cache DriverCache `json:"cache,omitempty"`
	// IO is native or threads.
	// +optional
	IO DriverIO `json:"io,omitempty"`
	// +optional
	Tag string `json:"tag,omitempty"`
	// +optional
	Shareable *bool `json:"shareable,omitempty"`
	// ErrorPolicy is stop, ignore, report or enospace.
	// +optional
	ErrorPolicy *DiskErrorPolicy `json:"errorPolicy,omitempty"`
}

// DiskDevice is how a volume appears in the guest; only one member may be set.
type DiskDevice struct {
	// +optional
	Disk *DiskTarget `json:"disk,omitempty"`
	// +optional
	LUN *LunTarget `json:"lun,omitempty"`
	// +optional
	CDRom *CDRomTarget `json:"cdrom,omitempty"`
}

// DiskBus is the controller a disk hangs off.
type DiskBus string

const (
	DiskBusVirtio DiskBus = "virtio"
	DiskBusSATA   DiskBus = "sata"
	DiskBusSCSI   DiskBus = "scsi"
	DiskBusUSB    DiskBus = "usb"
)

// DriverCache is the host page cache mode of a disk.
type DriverCache string

const (
	CacheNone         DriverCache = "none"
	CacheWriteThrough DriverCache = "writethrough"
	CacheWriteBack    DriverCache = "writeback"
)

// DriverIO is the host I/O mode of a disk.
type DriverIO string

const (
	IOThreads DriverIO = "threads"
	IONative  DriverIO = "native"
)

// DiskErrorPolicy is what the guest sees on a host I/O error.
type DiskErrorPolicy string

const (
	DiskErrorPolicyStop     DiskErrorPolicy = "stop"
	DiskErrorPolicyIgnore   DiskErrorPolicy = "ignore"
	DiskErrorPolicyReport   DiskErrorPolicy = "report"
	DiskErrorPolicyEnospace DiskErrorPolicy = "enospace"
)

// DiskTarget attaches a volume as a disk.
type DiskTarget struct {
	// Bus is virtio, sata, scsi or usb; sata when unset on amd64.
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// +optional
	PciAddress string `json:"pciAddress,omitempty"`
}

// LunTarget attaches a volume as a SCSI LUN.
type LunTarget struct {
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// +optional
	Reservation bool `json:"reservation,omitempty"`
}

// TrayState is the tray of a cdrom.
type TrayState string

const (
	TrayStateOpen   TrayState = "open"
	TrayStateClosed TrayState = "closed"
)

// CDRomTarget attaches a volume as a cdrom.
type CDRomTarget struct {
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly defaults to true, hence a pointer.
	// +optional
	ReadOnly *bool `json:"readonly,omitempty"`
	// +optional
	Tray TrayState `json:"tray,omitempty"`
}

// Input is an input device such as a USB tablet.
type Input struct {
	// Bus is usb or virtio.
	// +optional
	Bus string `json:"bus,omitempty"`
	// Type is tablet or keyboard.
	Type string `json:"type"`
	Name string `json:"name"`
}

// Watchdog is a named watchdog device.
type Watchdog struct {
	Name string `json:"name"`
	// +optional
	I6300ESB *I6300ESBWatchdog `json:"i6300esb,omitempty"`
}

// I6300ESBWatchdog is the Intel 6300ESB watchdog.
type I6300ESBWatchdog struct {
	// Action is poweroff, reset or shutdown.
	// +optional
	Action string `json:"action,omitempty"`
}

// WantsVSOCK reports devices that ask for a VSOCK device (autoattachVSOCK: true).
func (d *Devices) WantsVSOCK() bool { return d.AutoattachVSOCK != nil && *d.AutoattachVSOCK }
