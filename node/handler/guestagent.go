package handler

import (
	"context"
	"fmt"
	"net"
	"strings"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// applyGuestAgent reports what the guest agent says, as KubeVirt does: the AgentConnected
// condition while it answers (removed when it stops), the guest's OS, and the guest's own
// names and addresses of the NICs it matches by MAC address. A masquerade NIC keeps the pod's
// address: the guest's own is private to the pod.
func applyGuestAgent(vmi *v1.VirtualMachineInstance, ga *launcherapi.GuestAgentInfo) {
	if !ga.GetConnected() {
		removeCondition(vmi, v1.VirtualMachineInstanceAgentConnected)
		return
	}
	setCondition(vmi, v1.VirtualMachineInstanceAgentConnected, true, "", "")
	if os := ga.GetOs(); os != nil {
		vmi.Status.GuestOSInfo = v1.VirtualMachineInstanceGuestOSInfo{Name: os.Name, ID: os.Id, PrettyName: os.PrettyName,
			Version: os.Version, VersionID: os.VersionId, KernelRelease: os.KernelRelease, KernelVersion: os.KernelVersion, Machine: os.Machine}
	}
	byMAC := map[string]*launcherapi.GuestInterface{}
	for _, in := range ga.Interfaces {
		if hw, err := net.ParseMAC(in.Mac); err == nil {
			byMAC[hw.String()] = in
		}
	}
	masquerade := map[string]bool{}
	for _, in := range vmi.Spec.Domain.Devices.Interfaces {
		masquerade[in.Name] = in.Masquerade != nil
	}
	for i := range vmi.Status.Interfaces {
		s := &vmi.Status.Interfaces[i]
		in := byMAC[strings.ToLower(s.MAC)]
		if in == nil {
			continue
		}
		s.InterfaceName = in.Name
		s.InfoSource = "domain, guest-agent"
		if len(in.Ips) > 0 && !masquerade[s.Name] {
			s.IPs = append([]string(nil), in.Ips...)
			s.IP = in.Ips[0]
		}
	}
}

// applyAccessCredentials reports whether the guest agent applied the VMI's access credentials,
// as KubeVirt's AccessCredentialsSynchronized condition: a status and, on a failure, why.
func applyAccessCredentials(vmi *v1.VirtualMachineInstance, ac *launcherapi.AccessCredentialsStatus) {
	if ac == nil {
		removeCondition(vmi, v1.VirtualMachineInstanceAccessCredentialsSynchronized)
		return
	}
	setCondition(vmi, v1.VirtualMachineInstanceAccessCredentialsSynchronized, ac.Succeeded, "", ac.Message)
}

func removeCondition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) {
	kept := vmi.Status.Conditions[:0]
	for _, c := range vmi.Status.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	vmi.Status.Conditions = kept
}

// GuestAgent reports what the VM's guest agent last said, in KubeVirt's guestosinfo shape.
func (b backend) GuestAgent(_ context.Context, vmi nodeapi.VMI) (*v1.VirtualMachineInstanceGuestAgentInfo, error) {
	st, err := b.running(vmi)
	if err != nil {
		return nil, err
	}
	ga := st.lastStatus().GetGuestAgent()
	if !ga.GetConnected() {
		return nil, fmt.Errorf("%w: VMI does not have guest agent connected", nodeapi.ErrConflict)
	}
	return guestAgentInfo(ga), nil
}

func guestAgentInfo(ga *launcherapi.GuestAgentInfo) *v1.VirtualMachineInstanceGuestAgentInfo {
	out := &v1.VirtualMachineInstanceGuestAgentInfo{GAVersion: ga.Version, Hostname: ga.Hostname,
		FSInfo: v1.VirtualMachineInstanceFileSystemInfo{Filesystems: []v1.VirtualMachineInstanceFileSystem{}}}
	for _, c := range ga.SupportedCommands {
		out.SupportedCommands = append(out.SupportedCommands, v1.GuestAgentCommandInfo{Name: c, Enabled: true})
	}
	if os := ga.GetOs(); os != nil {
		out.OS = v1.VirtualMachineInstanceGuestOSInfo{Name: os.Name, ID: os.Id, PrettyName: os.PrettyName, Version: os.Version,
			VersionID: os.VersionId, KernelRelease: os.KernelRelease, KernelVersion: os.KernelVersion, Machine: os.Machine}
	}
	for _, u := range ga.Users {
		out.UserList = append(out.UserList, v1.VirtualMachineInstanceGuestOSUser{UserName: u.Name, Domain: u.Domain, LoginTime: u.LoginTime})
	}
	for _, f := range ga.Filesystems {
		out.FSInfo.Filesystems = append(out.FSInfo.Filesystems, v1.VirtualMachineInstanceFileSystem{DiskName: f.DiskName, MountPoint: f.MountPoint,
			FileSystemType: f.Type, UsedBytes: int(f.UsedBytes), TotalBytes: int(f.TotalBytes)})
	}
	return out
}
