package handler

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestLiveMigratableNamesKubeVirtsReason(t *testing.T) {
	vmi := func(binding string, vols ...v1.Volume) *v1.VirtualMachineInstance {
		in := v1.Interface{Name: "default"}
		switch binding {
		case "bridge":
			in.Bridge = &v1.InterfaceBridge{}
		case "masquerade":
			in.Masquerade = &v1.InterfaceMasquerade{}
		}
		v := &v1.VirtualMachineInstance{}
		v.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
		v.Spec.Domain.Devices.Interfaces = []v1.Interface{in}
		v.Spec.Volumes = vols
		return v
	}
	hostDisk := func(shared *bool) v1.Volume {
		return v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists, Shared: shared}}}
	}
	container := v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "x"}}}
	cases := []struct {
		name       string
		vmi        *v1.VirtualMachineInstance
		reason     string
		msgContain string
	}{
		{"bridge on the pod network", vmi("bridge", container), v1.VirtualMachineInstanceReasonInterfaceNotMigratable, "does not use masquerade"},
		{"non-shared hostDisk", vmi("masquerade", hostDisk(nil)), v1.VirtualMachineInstanceReasonDisksNotMigratable, "non-shared HostDisk"},
		{"disks are checked first", vmi("bridge", hostDisk(ptr.To(false))), v1.VirtualMachineInstanceReasonDisksNotMigratable, "non-shared HostDisk"},
	}
	if ok, reason, msg := liveMigratable(vmi("masquerade", container, hostDisk(ptr.To(true)))); !ok || reason != "" || msg != "" {
		t.Errorf("masquerade with a containerDisk and a shared hostDisk: %v %q %q, want migratable", ok, reason, msg)
	}
	for _, tc := range cases {
		ok, reason, msg := liveMigratable(tc.vmi)
		if ok || reason != tc.reason || !strings.Contains(msg, tc.msgContain) {
			t.Errorf("%s: %v %q %q, want %q with %q", tc.name, ok, reason, msg, tc.reason, tc.msgContain)
		}
	}
}
