package vm

import (
	"testing"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

func TestTargetNamesFollowLinuxLettering(t *testing.T) {
	for index, want := range map[int]string{0: "sda", 1: "sdb", 25: "sdz", 26: "sdaa", 27: "sdab", 51: "sdaz", 52: "sdba", 701: "sdzz", 702: "sdaaa"} {
		if got := targetName("sd", index); got != want {
			t.Errorf("disk %d: %s, want %s", index, got, want)
		}
	}
}

// TestTargetsOfColdAndHotpluggedDisks: cold-plugged disks are named in their order, SATA and
// SCSI sharing "sd"; a hotplugged disk takes the first free name of its bus, also one a
// detached disk left.
func TestTargetsOfColdAndHotpluggedDisks(t *testing.T) {
	disk := func(name string, bus launcherapi.Bus) *launcherapi.Disk {
		return &launcherapi.Disk{Name: name, Bus: bus}
	}
	cold := coldTargets([]*launcherapi.Disk{
		disk("root", launcherapi.Bus_BUS_VIRTIO),
		disk("cdrom", launcherapi.Bus_BUS_SATA),
		disk("data", launcherapi.Bus_BUS_VIRTIO),
		disk("scratch", launcherapi.Bus_BUS_SCSI),
	})
	want := map[string]string{"root": "vda", "cdrom": "sda", "data": "vdb", "scratch": "sdb"}
	for n, w := range want {
		if cold[n] != w {
			t.Errorf("cold disk %s: %q, want %q", n, cold[n], w)
		}
	}
	used := map[string]bool{}
	for _, t := range cold {
		used[t] = true
	}
	if got := freeTarget(launcherapi.Bus_BUS_SCSI, used); got != "sdc" {
		t.Errorf("first hotplugged scsi disk: %s", got)
	}
	if got := freeTarget(launcherapi.Bus_BUS_VIRTIO, used); got != "vdc" {
		t.Errorf("first hotplugged virtio disk: %s", got)
	}
	used["sdc"], used["sdd"] = true, true
	if got := freeTarget(launcherapi.Bus_BUS_SCSI, used); got != "sde" {
		t.Errorf("third hotplugged scsi disk: %s", got)
	}
	delete(used, "sdc") // detached
	if got := freeTarget(launcherapi.Bus_BUS_SCSI, used); got != "sdc" {
		t.Errorf("a disk after a detach: %s, want the name it left", got)
	}
}
