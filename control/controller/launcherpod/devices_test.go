package launcherpod

import (
	"sort"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestDeviceResourcesFollowKubeVirt(t *testing.T) {
	virtio := []virtv1.Interface{{Name: "default", Model: "virtio"}}
	cases := []struct {
		name      string
		devices   virtv1.Devices
		emulation bool
		want      string
	}{
		{"hardware, pod interface by default", virtv1.Devices{}, false, "kvm tun"},
		{"emulated", virtv1.Devices{}, true, "tun"},
		{"virtio interface", virtv1.Devices{Interfaces: virtio}, false, "kvm tun vhost-net"},
		{"virtio interface, emulated", virtv1.Devices{Interfaces: virtio}, true, "tun"},
		{"e1000 interface", virtv1.Devices{Interfaces: []virtv1.Interface{{Name: "default", Model: "e1000"}}}, false, "kvm tun"},
		{"no network", virtv1.Devices{AutoattachPodInterface: ptr.To(false)}, true, ""},
		{"vsock", virtv1.Devices{AutoattachVSOCK: ptr.To(true)}, true, "tun vhost-vsock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vmi := &virtv1.VirtualMachineInstance{}
			vmi.Spec.Domain.Devices = c.devices
			var got []string
			for name, q := range deviceResources(vmi, c.emulation) {
				if q.Value() != 1 {
					t.Errorf("%s: %s", name, q.String())
				}
				got = append(got, strings.TrimPrefix(string(name), "devices.kubevirt.io/"))
			}
			sort.Strings(got)
			if strings.Join(got, " ") != c.want {
				t.Fatalf("requests %q, want %q", got, c.want)
			}
		})
	}
}
