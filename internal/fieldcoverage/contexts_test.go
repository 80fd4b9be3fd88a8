/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"slices"
	"strings"
)

// complete adds what a VMI spec needs around the leaf being tested, so that the object is valid
// without it: a volume for every disk, a network for every interface and the other way round, a
// binding for an interface, data for a cloud-init volume, a kernel for kernelBoot. It only adds
// what is missing, and does the same with and without the leaf, so that the leaf stays the only
// difference. spec is the VMI spec (or the VM template's).
func complete(spec map[string]any, leafPath string) {
	devices := obj(spec, "domain", "devices")
	disks, volumes := list(devices, "disks"), list(spec, "volumes")
	for _, name := range missing(disks, volumes) {
		appendTo(spec, map[string]any{"name": name, "emptyDisk": map[string]any{"capacity": "1Gi"}}, "volumes")
	}
	ifaces, networks := list(devices, "interfaces"), list(spec, "networks")
	for _, name := range missing(ifaces, networks) {
		appendTo(spec, map[string]any{"name": name, "pod": map[string]any{}}, "networks")
	}
	for _, name := range missing(networks, ifaces) {
		appendTo(devices, map[string]any{"name": name, "bridge": map[string]any{}}, "interfaces")
	}
	for _, e := range list(devices, "interfaces") {
		in := e.(map[string]any)
		if hasAny(in, "bridge", "masquerade", "sriov", "passtBinding", "binding") {
			continue
		}
		// Ports only go with masquerade; a bridge leaf needs the other binding to compare with.
		if _, ports := in["ports"]; ports || strings.HasSuffix(leafPath, "interfaces[].bridge") {
			in["masquerade"] = map[string]any{}
		} else {
			in["bridge"] = map[string]any{}
		}
	}
	for _, e := range list(spec, "networks") {
		if n := e.(map[string]any); !hasAny(n, "pod", "multus") {
			n["pod"] = map[string]any{}
		}
	}
	for _, e := range list(devices, "disks") {
		// sata, the default bus, has no read-only disks.
		if d, ok := e.(map[string]any)["disk"].(map[string]any); ok && strings.HasSuffix(leafPath, "disks[].disk.readonly") && !hasAny(d, "bus") {
			d["bus"] = "virtio"
		}
	}
	for _, e := range list(spec, "volumes") {
		vol := e.(map[string]any)
		if !hasAny(vol, "hostDisk", "persistentVolumeClaim", "cloudInitNoCloud", "cloudInitConfigDrive", "containerDisk",
			"emptyDisk", "dataVolume", "configMap", "secret", "serviceAccount", "memoryDump") {
			vol["emptyDisk"] = map[string]any{"capacity": "1Gi"}
		}
		if ci, ok := vol["cloudInitNoCloud"].(map[string]any); ok && !hasAny(ci, "userData", "userDataBase64", "networkData", "networkDataBase64") &&
			!namesSecret(ci, "secretRef") && !namesSecret(ci, "networkDataSecretRef") {
			// The other kind of data than the leaf's, so that the leaf adds to it.
			if strings.Contains(leafPath, "cloudInitNoCloud.userData") || strings.Contains(leafPath, "cloudInitNoCloud.secretRef") {
				ci["networkData"] = "version: 2\n"
			} else {
				ci["userData"] = "#cloud-config\n"
			}
		}
		if hd, ok := vol["hostDisk"].(map[string]any); ok && hd["type"] == "DiskOrCreate" && !hasAny(hd, "capacity") {
			hd["capacity"] = "1Gi"
		}
	}
	if fw, ok := obj(spec, "domain")["firmware"].(map[string]any); ok {
		if kb, ok := fw["kernelBoot"].(map[string]any); ok {
			c := obj(kb, "container")
			if !hasAny(c, "image") {
				c["image"] = "registry.example/kernel:1"
			}
			if !hasAny(c, "kernelPath") {
				c["kernelPath"] = "/boot/vmlinuz"
			}
		}
	}
	completeAccessCredentials(spec, devices)
	if spec["dnsPolicy"] == "None" && len(list(spec, "dnsConfig", "nameservers")) == 0 {
		appendTo(spec, "10.96.0.10", "dnsConfig", "nameservers")
	}
}

// namesSecret reports a reference at key of m with a name.
func namesSecret(m map[string]any, key string) bool {
	ref, ok := m[key].(map[string]any)
	return ok && hasAny(ref, "name")
}

// completeAccessCredentials gives each access credential a secret and a propagation method
// (the guest agent's, for root), and the VMI a cloud-init volume for the noCloud method.
func completeAccessCredentials(spec, devices map[string]any) {
	acs := list(spec, "accessCredentials")
	if len(acs) == 0 {
		return
	}
	if !slices.ContainsFunc(list(spec, "volumes"), func(v any) bool { return hasAny(v.(map[string]any), "cloudInitNoCloud") }) {
		appendTo(devices, map[string]any{"name": "cloudinit-keys", "disk": map[string]any{"bus": "virtio"}}, "disks")
		appendTo(spec, map[string]any{"name": "cloudinit-keys", "cloudInitNoCloud": map[string]any{"userData": "#cloud-config\n"}}, "volumes")
	}
	for _, e := range acs {
		ac := e.(map[string]any)
		for _, kind := range []string{"sshPublicKey", "userPassword"} {
			k, ok := ac[kind].(map[string]any)
			if !ok {
				continue
			}
			if sec := obj(k, "source", "secret"); !hasAny(sec, "secretName") {
				sec["secretName"] = "access-keys"
			}
			pm := obj(k, "propagationMethod")
			if kind == "userPassword" {
				if !hasAny(pm, "qemuGuestAgent") {
					pm["qemuGuestAgent"] = map[string]any{}
				}
				continue
			}
			if !hasAny(pm, "noCloud", "configDrive", "qemuGuestAgent") {
				pm["qemuGuestAgent"] = map[string]any{"users": []any{"root"}}
			}
			if ga, ok := pm["qemuGuestAgent"].(map[string]any); ok && len(list(ga, "users")) == 0 {
				ga["users"] = []any{"root"}
			}
		}
	}
}

// missing returns the names in from that to lacks, in order.
func missing(from, to []any) []string {
	have := names(to)
	var out []string
	for n := range names(from) {
		if !have[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
