/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

// Interface is a guest NIC attached to the network of the same name.
type Interface struct {
	// Name must match a network.
	Name string `json:"name"`
	// Model is e1000, e1000e, igb, ne2k_pci, pcnet, rtl8139 or virtio (the default).
	// +optional
	Model string `json:"model,omitempty"`
	// InterfaceBindingMethod says how the NIC reaches the network.
	InterfaceBindingMethod `json:",inline"`
	// Binding names a binding plugin from the KubeVirt CR instead.
	// +optional
	Binding *PluginBinding `json:"binding,omitempty"`
	// Ports limits masquerade forwarding to these ports; all when empty.
	// +optional
	Ports []Port `json:"ports,omitempty"`
	// +optional
	MacAddress string `json:"macAddress,omitempty"`
	// +optional
	BootOrder *uint `json:"bootOrder,omitempty"`
	// +optional
	PciAddress string `json:"pciAddress,omitempty"`
	// +optional
	Tag string `json:"tag,omitempty"`
	// +optional
	ACPIIndex int `json:"acpiIndex,omitempty"`
	// State is up, down or absent; empty means up.
	// +optional
	State InterfaceState `json:"state,omitempty"`
}

// InterfaceState is the requested link state.
type InterfaceState string

const (
	InterfaceStateAbsent   InterfaceState = "absent"
	InterfaceStateLinkUp   InterfaceState = "up"
	InterfaceStateLinkDown InterfaceState = "down"
)

// InterfaceBindingMethod connects a NIC; only one member may be set.
type InterfaceBindingMethod struct {
	// +optional
	Bridge *InterfaceBridge `json:"bridge,omitempty"`
	// +optional
	Masquerade *InterfaceMasquerade `json:"masquerade,omitempty"`
	// +optional
	SRIOV *InterfaceSRIOV `json:"sriov,omitempty"`
	// +optional
	PasstBinding *InterfacePasstBinding `json:"passtBinding,omitempty"`
}

// InterfaceBridge bridges the NIC onto the pod interface.
type InterfaceBridge struct{}

// InterfaceMasquerade NATs the guest behind the pod IP.
type InterfaceMasquerade struct{}

// InterfaceSRIOV passes an SR-IOV VF through.
type InterfaceSRIOV struct{}

// InterfacePasstBinding uses passt user-mode networking.
type InterfacePasstBinding struct{}

// PluginBinding names a network binding plugin.
type PluginBinding struct {
	Name string `json:"name"`
}

// Port is a port forwarded to the guest.
type Port struct {
	// +optional
	Name string `json:"name,omitempty"`
	// Protocol is TCP (the default) or UDP.
	// +optional
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port"`
}

// Network is a network the VMI's interfaces can attach to.
type Network struct {
	Name          string `json:"name"`
	NetworkSource `json:",inline"`
}

// NetworkSource is the kind of network; only one member may be set.
type NetworkSource struct {
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`
	// +optional
	Multus *MultusNetwork `json:"multus,omitempty"`
}

// PodNetwork is the launcher pod's own network.
type PodNetwork struct {
	// VMNetworkCIDR is the guest-side subnet for masquerade; 10.0.2.0/24 by default.
	// +optional
	VMNetworkCIDR string `json:"vmNetworkCIDR,omitempty"`
	// +optional
	VMIPv6NetworkCIDR string `json:"vmIPv6NetworkCIDR,omitempty"`
}

// MultusNetwork is a secondary network from a NetworkAttachmentDefinition.
type MultusNetwork struct {
	// NetworkName is <name> or <namespace>/<name>.
	NetworkName string `json:"networkName"`
	// +optional
	Default bool `json:"default,omitempty"`
}
