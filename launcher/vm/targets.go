package vm

import launcherapi "github.com/qvirt/qvirt/launcher/api"

// Guest device names of disks, as KubeVirt reports them in a VMI's volume status: libvirt's
// target names, "vd" for virtio and "sd" for SATA and SCSI alike, lettered as Linux letters
// its sd disks (a..z, aa..az, ...). They say where the guest is expected to see a disk; the
// guest's kernel names its devices itself.

func targetPrefix(bus launcherapi.Bus) string {
	if bus == launcherapi.Bus_BUS_VIRTIO {
		return "vd"
	}
	return "sd"
}

// targetName is the name of the index-th disk (from 0) of a prefix.
func targetName(prefix string, index int) string {
	const letters = 'z' - 'a' + 1
	var name []byte
	for ; index >= 0; index = index/letters - 1 {
		name = append([]byte{byte('a' + index%letters)}, name...)
	}
	return prefix + string(name)
}

// coldTargets names the disks the VM started with: in their order, each the next of its
// prefix, as libvirt numbers the disks of a new domain.
func coldTargets(disks []*launcherapi.Disk) map[string]string {
	next := map[string]int{}
	out := make(map[string]string, len(disks))
	for _, d := range disks {
		p := targetPrefix(d.Bus)
		out[d.Name] = targetName(p, next[p])
		next[p]++
	}
	return out
}

// freeTarget is the first name of the bus's prefix no disk has: a hotplugged disk takes the
// name a detached one left, as KubeVirt names a new volume.
func freeTarget(bus launcherapi.Bus, used map[string]bool) string {
	p := targetPrefix(bus)
	for i := 0; ; i++ {
		if n := targetName(p, i); !used[n] {
			return n
		}
	}
}
