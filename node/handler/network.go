package handler

import (
	"context"
	"os"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// PlumbedNIC is one guest interface wired into the pod's network.
type PlumbedNIC struct {
	// Tap is handed to the launcher; the node agent closes its copy afterwards.
	Tap *os.File
	// TapName is the tap's name in the pod's namespace, for its traffic counters.
	TapName string
	MAC     string
	// IPs the network sees for the guest (the pod's, for both bindings).
	IPs []string
	// PodInterfaceName is the pod interface the guest's traffic uses (eth0).
	PodInterfaceName string
	// GuestAddr is where port-forward connects to reach the guest: from inside the pod's
	// namespace when GuestAddrInPod, else from the node's.
	GuestAddr      string
	GuestAddrInPod bool
}

// PodNet is what the node agent found of the launcher pod for its network.
type PodNet struct {
	// NetnsPath is the pod's network namespace.
	NetnsPath string
	// DNS is the pod's resolver configuration, empty when it could not be read.
	DNS PodDNS
}

// Network wires a VMI's interfaces inside the launcher's network namespace.
type Network interface {
	// Setup is idempotent: after a node agent restart it finds what exists, restarts what
	// only lived in the old process (such as the DHCP server), and returns the same answer.
	Setup(ctx context.Context, pod PodNet, vmi *v1.VirtualMachineInstance, iface v1.Interface) (*PlumbedNIC, error)
	// Teardown releases what Setup holds in this process for the VMI with this UID.
	Teardown(uid types.UID)
}

// podInterfaces returns the interfaces on the pod network: the only kind qvirt wires.
func podInterfaces(vmi *v1.VirtualMachineInstance) []v1.Interface {
	pod := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil {
			pod[n.Name] = true
		}
	}
	var out []v1.Interface
	for _, in := range vmi.Spec.Domain.Devices.Interfaces {
		if pod[in.Name] {
			out = append(out, in)
		}
	}
	return out
}
