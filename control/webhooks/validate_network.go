/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"net"
	"regexp"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

var ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9-_]+$`)

// masqueradeBridgeMAC is the MAC of the in-pod bridge masquerade uses.
const masqueradeBridgeMAC = "02:00:00:00:00:00"

func validateNetworking(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	networks := map[string]*v1.Network{}
	podNetwork := ""
	for i := range spec.Networks {
		n := &spec.Networks[i]
		np := path.Child("networks").Index(i)
		if _, dup := networks[n.Name]; dup {
			errs = append(errs, duplicate(np.Child("name"), n.Name, "Network with name %q already exists, every network must have a unique name", n.Name))
		}
		networks[n.Name] = n
		switch kinds := networkKinds(n.NetworkSource); {
		case kinds == 0:
			errs = append(errs, required(np, "should have a network type"))
		case kinds > 1:
			errs = append(errs, invalid(np, kinds, "should have only one network type"))
		}
		if n.Pod != nil {
			if podNetwork != "" {
				errs = append(errs, duplicate(np.Child("pod"), n.Name,
					"more than one pod network in %s: %q and %q", path.Child("networks"), podNetwork, n.Name))
			}
			podNetwork = n.Name
			errs = append(errs, validatePodCIDR(np.Child("pod"), n.Pod)...)
		}
	}
	ifaces := map[string]bool{}
	for i, in := range spec.Domain.Devices.Interfaces {
		ip := path.Child("domain", "devices", "interfaces").Index(i)
		if ifaces[in.Name] {
			errs = append(errs, duplicate(ip.Child("name"), in.Name, "Only one interface can be connected to one specific network"))
		}
		ifaces[in.Name] = true
		if !ifaceNameRE.MatchString(in.Name) {
			errs = append(errs, invalid(ip.Child("name"), in.Name,
				"Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)"))
		}
		net, ok := networks[in.Name]
		if !ok {
			errs = append(errs, invalid(ip.Child("name"), in.Name, "%s '%s' not found.", ip.Child("name"), in.Name))
		}
		errs = append(errs, validateBinding(ip, in, net)...)
		errs = append(errs, validateMAC(ip, in)...)
		errs = append(errs, validatePorts(ip, in)...)
	}
	for i, n := range spec.Networks {
		if !ifaces[n.Name] {
			np := path.Child("networks").Index(i).Child("name")
			errs = append(errs, required(np, "%s '%s' not found.", np, n.Name))
		}
	}
	return errs
}

func networkKinds(s v1.NetworkSource) int {
	n := 0
	if s.Pod != nil {
		n++
	}
	if s.Multus != nil {
		n++
	}
	return n
}

func validatePodCIDR(p *field.Path, pod *v1.PodNetwork) field.ErrorList {
	var errs field.ErrorList
	for _, c := range []struct {
		name, cidr string
		v4         bool
	}{{"vmNetworkCIDR", pod.VMNetworkCIDR, true}, {"vmIPv6NetworkCIDR", pod.VMIPv6NetworkCIDR, false}} {
		if c.cidr == "" {
			continue
		}
		ip, ipnet, err := net.ParseCIDR(c.cidr)
		if err != nil || (ip.To4() != nil) != c.v4 {
			errs = append(errs, invalid(p.Child(c.name), c.cidr, "%s '%s' is not a valid CIDR", p.Child(c.name), c.cidr))
			continue
		}
		// The subnet holds its network and broadcast addresses, the gateway and the guest.
		if ones, bits := ipnet.Mask.Size(); c.v4 && bits-ones < 2 {
			errs = append(errs, invalid(p.Child(c.name), c.cidr,
				"%s '%s' has no room for a gateway and a guest: a /30 or larger subnet is needed", p.Child(c.name), c.cidr))
		}
	}
	return errs
}

// validateBinding wants exactly one of bridge and masquerade, the two bindings
// qvirt implements; the others are refused where they appear.
func validateBinding(ip *field.Path, in v1.Interface, net *v1.Network) field.ErrorList {
	var errs field.ErrorList
	b := in.InterfaceBindingMethod
	if b.SRIOV != nil {
		errs = append(errs, unsupported(ip.Child("sriov"), "the sriov interface binding"))
	}
	if b.PasstBinding != nil {
		errs = append(errs, unsupported(ip.Child("passtBinding"), "the passt interface binding"))
	}
	if in.Binding != nil {
		errs = append(errs, unsupported(ip.Child("binding"), "network binding plugins"))
	}
	switch {
	case b.Bridge != nil && b.Masquerade != nil:
		errs = append(errs, invalid(ip, nil, "%s must have exactly one binding method set: bridge or masquerade", ip))
	case b.Bridge == nil && b.Masquerade == nil && len(errs) == 0:
		errs = append(errs, required(ip, "%s must have exactly one binding method set: bridge or masquerade", ip))
	}
	if b.Masquerade != nil && net != nil && net.Pod == nil {
		errs = append(errs, invalid(ip.Child("name"), in.Name, "Masquerade interface only implemented with pod network"))
	}
	return errs
}

func validateMAC(ip *field.Path, in v1.Interface) field.ErrorList {
	if in.MacAddress == "" {
		return nil
	}
	mp := ip.Child("macAddress")
	mac, err := net.ParseMAC(in.MacAddress)
	switch {
	case err != nil:
		return field.ErrorList{invalid(mp, in.MacAddress, "interface %s has malformed MAC address (%s).", ip.Child("name"), in.MacAddress)}
	case len(mac) != 6:
		return field.ErrorList{invalid(mp, in.MacAddress, "interface %s has MAC address (%s) that is too long.", ip.Child("name"), in.MacAddress)}
	case mac[0]&1 == 1:
		return field.ErrorList{invalid(mp, in.MacAddress, "interface %s has a multicast MAC address (%s).", ip.Child("name"), in.MacAddress)}
	case in.Masquerade != nil && mac.String() == masqueradeBridgeMAC:
		return field.ErrorList{invalid(mp, in.MacAddress, "The requested MAC address is reserved for the in-pod bridge. Please choose another one.")}
	}
	return nil
}

// validatePorts applies KubeVirt's port rules; ports only mean something to
// masquerade, so qvirt refuses them elsewhere.
func validatePorts(ip *field.Path, in v1.Interface) field.ErrorList {
	if len(in.Ports) == 0 {
		return nil
	}
	pp := ip.Child("ports")
	if in.Masquerade == nil {
		return field.ErrorList{invalid(pp, nil, "%s: ports are only supported with the masquerade binding", pp)}
	}
	var errs field.ErrorList
	names := map[string]bool{}
	for i, port := range in.Ports {
		p := pp.Index(i)
		if port.Name != "" {
			if names[port.Name] {
				errs = append(errs, duplicate(p.Child("name"), port.Name, "Duplicate name of the port: %s", port.Name))
			}
			names[port.Name] = true
			if len(k8svalidation.IsValidPortName(port.Name)) > 0 {
				errs = append(errs, invalid(p.Child("name"), port.Name, "Invalid name of the port: %s", port.Name))
			}
		}
		switch {
		case port.Port == 0:
			errs = append(errs, required(p, "Port field is mandatory."))
		case port.Port < 0 || port.Port > 65535:
			errs = append(errs, invalid(p, port.Port, "Port field must be in range 0 < x < 65536."))
		}
		if port.Protocol != "" && port.Protocol != "TCP" && port.Protocol != "UDP" {
			errs = append(errs, invalid(p.Child("protocol"), port.Protocol, "Unknown protocol, only TCP or UDP allowed"))
		}
	}
	return errs
}
