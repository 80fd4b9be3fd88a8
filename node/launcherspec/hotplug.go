package launcherspec

import (
	"fmt"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// HotplugDisk is the launcher's view of the disk of a hotplugged volume whose image (or block
// device) the caller hands in under fdName.
func HotplugDisk(vmi *v1.VirtualMachineInstance, volume, fdName string, block bool) (*launcherapi.Disk, error) {
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.Name != volume {
			continue
		}
		ld := diskDevice(d)
		ld.BootOrder = 0 // a running guest boots no more from it
		ld.Source = &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: fdName, BlockDevice: block}}
		return ld, nil
	}
	return nil, fmt.Errorf("volume %s has no disk in spec.domain.devices.disks", volume)
}
