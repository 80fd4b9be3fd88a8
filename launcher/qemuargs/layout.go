package qemuargs

import (
	"path/filepath"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// Layout names the files of one VM inside its per-VM directory. The node agent shares this
// directory with the launcher, so the socket names are part of the contract between them.
type Layout struct {
	Dir string
	// EphemeralDir holds the containerDisk overlays; empty means DisksDir. A launcher pod points
	// it at its own emptyDir, so that an overlay goes with the pod.
	EphemeralDir string
	// TapFDs maps the name of each descriptor the caller handed in (an interface's tap_fd_name,
	// the vhost-vsock device's) to the descriptor number QEMU inherits.
	TapFDs map[string]int
	// SerialLogFD is the descriptor number QEMU inherits to write the serial console's log
	// into: the launcher reads the other end and keeps SerialLog, capped (QEMU's own logfile
	// grows without bound). 0 means QEMU keeps no log of the console.
	SerialLogFD int
	// Binary is the QEMU executable; it becomes argv[0].
	Binary string
	// Sandbox turns on QEMU's seccomp filter (see SandboxOptions); set it where this QEMU
	// binary and kernel support it.
	Sandbox bool
}

// NewLayout returns the layout of a VM directory with the default QEMU binary.
func NewLayout(dir string) Layout {
	return Layout{Dir: dir, Binary: "qemu-system-x86_64", TapFDs: map[string]int{}}
}

func (l Layout) QMPSocket() string    { return filepath.Join(l.Dir, "qmp.sock") }
func (l Layout) SerialSocket() string { return filepath.Join(l.Dir, "serial0.sock") }
func (l Layout) SerialLog() string    { return filepath.Join(l.Dir, "serial0.log") }
func (l Layout) VNCSocket() string    { return filepath.Join(l.Dir, "vnc.sock") }

// GuestAgentSocket is QEMU's end of the guest agent channel (org.qemu.guest_agent.0).
func (l Layout) GuestAgentSocket() string { return filepath.Join(l.Dir, "qga.sock") }
func (l Layout) DisksDir() string         { return filepath.Join(l.Dir, "disks") }

// Names of the migration sockets in a VM directory. On a target the launcher's QEMU listens
// on the first two; on a source the node agent listens on the Out ones and QEMU connects.
const (
	MigrationSocketName         = "migration.sock"
	MigrationDisksSocketName    = "migration-disks.sock"
	MigrationOutSocketName      = "migration-out.sock"
	MigrationOutDisksSocketName = "migration-out-disks.sock"
)

// MigrationSocket is where a migration target's QEMU listens for the source's stream.
func (l Layout) MigrationSocket() string { return filepath.Join(l.Dir, MigrationSocketName) }

// MigrationDisksSocket is where a migration target serves its local disks (NBD) for the
// source to mirror into.
func (l Layout) MigrationDisksSocket() string { return filepath.Join(l.Dir, MigrationDisksSocketName) }

// OverlayDir is where containerDisk overlays and blank disks (emptyDisk) are written: the pod's
// own writable space, accounted as its ephemeral storage.
func (l Layout) OverlayDir() string {
	if l.EphemeralDir != "" {
		return l.EphemeralDir
	}
	return l.DisksDir()
}

// DiskImage is where QEMU reads a disk from, and in which format.
type DiskImage struct {
	Path   string
	Format launcherapi.ImageFormat
	// Generated is true when the launcher creates the file itself (overlay, blank disk, seed ISO).
	Generated bool
	// BlockDevice: QEMU opens Path as a block device (host_device), not as a file.
	BlockDevice bool
}

// DiskImage resolves the file backing a disk. Files the launcher creates live in DisksDir, but
// for containerDisk overlays and blank disks, which live in OverlayDir.
func (l Layout) DiskImage(d *launcherapi.Disk) DiskImage {
	switch src := d.Source.(type) {
	case *launcherapi.Disk_ContainerDisk:
		return DiskImage{Path: filepath.Join(l.OverlayDir(), d.Name+".qcow2"), Format: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2, Generated: true}
	case *launcherapi.Disk_EmptyDisk:
		// In the pod's own space too: a blank disk counts against its ephemeral storage.
		return DiskImage{Path: filepath.Join(l.OverlayDir(), d.Name+".qcow2"), Format: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2, Generated: true}
	case *launcherapi.Disk_CloudInitNoCloud:
		return DiskImage{Path: filepath.Join(l.DisksDir(), d.Name+".iso"), Format: launcherapi.ImageFormat_IMAGE_FORMAT_RAW, Generated: true}
	case *launcherapi.Disk_File:
		return DiskImage{Path: src.File.GetPath(), Format: src.File.GetFormat(), BlockDevice: src.File.GetBlockDevice()}
	}
	return DiskImage{}
}
