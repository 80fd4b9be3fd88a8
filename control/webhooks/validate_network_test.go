/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func masquerade(s *v1.VirtualMachineInstanceSpec) *v1.Interface {
	in := &s.Domain.Devices.Interfaces[0]
	in.Bridge, in.Masquerade = nil, &v1.InterfaceMasquerade{}
	return in
}

func TestValidateNetworking(t *testing.T) {
	podNet := func(name string) v1.Network {
		return v1.Network{Name: name, NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}
	}
	bridge := func(name string) v1.Interface {
		return v1.Interface{Name: name, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}
	}
	runRuleCases(t, []ruleCase{
		{"interface without network", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].Name = "other" },
			"spec.domain.devices.interfaces[0].name", field.ErrorTypeInvalid, "spec.domain.devices.interfaces[0].name 'other' not found."},
		{"network without interface", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces = nil },
			"spec.networks[0].name", field.ErrorTypeRequired, "spec.networks[0].name 'default' not found."},
		{"duplicate network", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks = append(s.Networks, s.Networks[0]) },
			"spec.networks[1].name", field.ErrorTypeDuplicate, `Network with name "default" already exists`},
		{"duplicate interface", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, bridge("default"))
		}, "spec.domain.devices.interfaces[1].name", field.ErrorTypeDuplicate, "Only one interface can be connected to one specific network"},
		{"two pod networks", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Networks = append(s.Networks, podNet("second"))
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, bridge("second"))
		}, "spec.networks[1].pod", field.ErrorTypeDuplicate, "more than one pod network"},
		{"network without type", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod = nil },
			"spec.networks[0]", field.ErrorTypeRequired, "should have a network type"},
		{"network with two types", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Multus = &v1.MultusNetwork{NetworkName: "n"} },
			"spec.networks[0]", field.ErrorTypeInvalid, "should have only one network type"},
		{"interface name format", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].Name = "a.b"
			s.Networks[0].Name = "a.b"
		}, "spec.domain.devices.interfaces[0].name", field.ErrorTypeInvalid, "Network interface name can only contain"},
		{"no binding", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].Bridge = nil },
			"spec.domain.devices.interfaces[0]", field.ErrorTypeRequired, "must have exactly one binding method set: bridge or masquerade"},
		{"bridge and masquerade", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].Masquerade = &v1.InterfaceMasquerade{}
		}, "spec.domain.devices.interfaces[0]", field.ErrorTypeInvalid, "must have exactly one binding method set"},
		{"sriov", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}
		}, "spec.domain.devices.interfaces[0].sriov", field.ErrorTypeNotSupported, "qvirt does not support the sriov interface binding"},
		{"passt", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}
		}, "spec.domain.devices.interfaces[0].passtBinding", field.ErrorTypeNotSupported, "qvirt does not support the passt interface binding"},
		{"binding plugin", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].Bridge = nil
			s.Domain.Devices.Interfaces[0].Binding = &v1.PluginBinding{Name: "macvtap"}
		}, "spec.domain.devices.interfaces[0].binding", field.ErrorTypeNotSupported, "qvirt does not support network binding plugins"},
		{"multus network", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Networks[0].NetworkSource = v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}
		}, "spec.networks[0].multus", field.ErrorTypeNotSupported, "qvirt does not support multus networks"},
		{"malformed MAC", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].MacAddress = "02:00:zz:00:00:01"
		},
			"spec.domain.devices.interfaces[0].macAddress", field.ErrorTypeInvalid, "interface spec.domain.devices.interfaces[0].name has malformed MAC address (02:00:zz:00:00:01)."},
		{"long MAC", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].MacAddress = "02:00:00:00:00:00:00:01"
		},
			"spec.domain.devices.interfaces[0].macAddress", field.ErrorTypeInvalid, "that is too long."},
		{"multicast MAC", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].MacAddress = "01:00:5e:00:00:01"
		},
			"spec.domain.devices.interfaces[0].macAddress", field.ErrorTypeInvalid, "multicast"},
		{"reserved masquerade MAC", nil, func(s *v1.VirtualMachineInstanceSpec) { masquerade(s).MacAddress = "02:00:00:00:00:00" },
			"spec.domain.devices.interfaces[0].macAddress", field.ErrorTypeInvalid, "reserved for the in-pod bridge"},
		{"ports on bridge", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 22}} },
			"spec.domain.devices.interfaces[0].ports", field.ErrorTypeInvalid, "ports are only supported with the masquerade binding"},
		{"port zero", nil, func(s *v1.VirtualMachineInstanceSpec) { masquerade(s).Ports = []v1.Port{{Name: "ssh"}} },
			"spec.domain.devices.interfaces[0].ports[0]", field.ErrorTypeRequired, "Port field is mandatory."},
		{"port range", nil, func(s *v1.VirtualMachineInstanceSpec) { masquerade(s).Ports = []v1.Port{{Port: 70000}} },
			"spec.domain.devices.interfaces[0].ports[0]", field.ErrorTypeInvalid, "Port field must be in range 0 < x < 65536."},
		{"port protocol", nil, func(s *v1.VirtualMachineInstanceSpec) { masquerade(s).Ports = []v1.Port{{Port: 53, Protocol: "SCTP"}} },
			"spec.domain.devices.interfaces[0].ports[0].protocol", field.ErrorTypeInvalid, "Unknown protocol, only TCP or UDP allowed"},
		{"port name twice", nil, func(s *v1.VirtualMachineInstanceSpec) {
			masquerade(s).Ports = []v1.Port{{Name: "http", Port: 80}, {Name: "http", Port: 8080}}
		}, "spec.domain.devices.interfaces[0].ports[1].name", field.ErrorTypeDuplicate, "Duplicate name of the port: http"},
		{"port name format", nil, func(s *v1.VirtualMachineInstanceSpec) { masquerade(s).Ports = []v1.Port{{Name: "Not_Valid", Port: 80}} },
			"spec.domain.devices.interfaces[0].ports[0].name", field.ErrorTypeInvalid, "Invalid name of the port: Not_Valid"},
		{"interface boot order zero", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].BootOrder = ptr(uint(0)) },
			"spec.domain.devices.interfaces[0].bootOrder", field.ErrorTypeInvalid, "must have a boot order > 0"},
		{"pod CIDR", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0/33" },
			"spec.networks[0].pod.vmNetworkCIDR", field.ErrorTypeInvalid, "is not a valid CIDR"},
		{"pod CIDR IPv6", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "fd10:0:2::/120" },
			"spec.networks[0].pod.vmNetworkCIDR", field.ErrorTypeInvalid, "is not a valid CIDR"},
		{"pod CIDR without a mask", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0" },
			"spec.networks[0].pod.vmNetworkCIDR", field.ErrorTypeInvalid, "is not a valid CIDR"},
		{"pod CIDR /31", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0/31" },
			"spec.networks[0].pod.vmNetworkCIDR", field.ErrorTypeInvalid, "no room for a gateway and a guest"},
		{"pod CIDR /32", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.0.2.7/32" },
			"spec.networks[0].pod.vmNetworkCIDR", field.ErrorTypeInvalid, "no room for a gateway and a guest"},
	})
}

func TestMasqueradeWithPortsIsValid(t *testing.T) {
	s := baseSpec()
	in := masquerade(s)
	in.MacAddress = "02:6b:8e:00:00:01"
	in.Model = "virtio"
	in.Ports = []v1.Port{{Name: "ssh", Port: 22}, {Port: 8080, Protocol: "TCP"}, {Port: 53, Protocol: "UDP"}}
	for _, cidr := range []string{"10.11.0.0/24", "192.168.7.0/30", "172.16.5.77/16"} {
		s.Networks[0].Pod.VMNetworkCIDR = cidr
		if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
			t.Errorf("%s refused: %v", cidr, errs)
		}
	}
}
