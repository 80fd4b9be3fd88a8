package guestagent

import (
	"context"
	"errors"
	"net"
	"sort"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// What qemu-ga answers, as its QAPI schema names the members.
type (
	agentInfo struct {
		Version           string `json:"version"`
		SupportedCommands []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"supported_commands"`
	}
	osInfo struct {
		ID            string `json:"id"`
		Name          string `json:"name"`
		PrettyName    string `json:"pretty-name"`
		Version       string `json:"version"`
		VersionID     string `json:"version-id"`
		KernelRelease string `json:"kernel-release"`
		KernelVersion string `json:"kernel-version"`
		Machine       string `json:"machine"`
	}
	hostName struct {
		HostName string `json:"host-name"`
	}
	netInterface struct {
		Name        string `json:"name"`
		HardwareAdd string `json:"hardware-address"`
		IPAddresses []struct {
			Type    string `json:"ip-address-type"`
			Address string `json:"ip-address"`
		} `json:"ip-addresses"`
	}
	user struct {
		User      string  `json:"user"`
		Domain    string  `json:"domain"`
		LoginTime float64 `json:"login-time"`
	}
	fsInfo struct {
		Name       string  `json:"name"`
		Mountpoint string  `json:"mountpoint"`
		Type       string  `json:"type"`
		UsedBytes  *uint64 `json:"used-bytes"`
		TotalBytes *uint64 `json:"total-bytes"`
		Disk       []struct {
			Dev string `json:"dev"`
		} `json:"disk"`
	}
)

// Info asks the agent everything the node reports about the guest. A command the agent does
// not offer leaves its part empty; any other failure is returned (the session is then unusable).
func (c *Client) Info(ctx context.Context) (*launcherapi.GuestAgentInfo, error) {
	out := &launcherapi.GuestAgentInfo{Connected: true}
	var ai agentInfo
	if err := c.Execute(ctx, "guest-info", nil, &ai); err != nil {
		return nil, err
	}
	out.Version = ai.Version
	for _, sc := range ai.SupportedCommands {
		if sc.Enabled {
			out.SupportedCommands = append(out.SupportedCommands, sc.Name)
		}
	}
	sort.Strings(out.SupportedCommands)

	optional := func(err error) error {
		if IsCommandNotFound(err) || isUnsupported(err) {
			return nil
		}
		return err
	}
	var oi osInfo
	if err := optional(c.Execute(ctx, "guest-get-osinfo", nil, &oi)); err != nil {
		return nil, err
	}
	out.Os = &launcherapi.GuestOSInfo{Name: oi.Name, Id: oi.ID, PrettyName: oi.PrettyName, Version: oi.Version, VersionId: oi.VersionID,
		KernelRelease: oi.KernelRelease, KernelVersion: oi.KernelVersion, Machine: oi.Machine}
	var hn hostName
	if err := optional(c.Execute(ctx, "guest-get-host-name", nil, &hn)); err != nil {
		return nil, err
	}
	out.Hostname = hn.HostName
	var ifs []netInterface
	if err := optional(c.Execute(ctx, "guest-network-get-interfaces", nil, &ifs)); err != nil {
		return nil, err
	}
	for _, in := range ifs {
		if isLoopback(in) {
			continue
		}
		gi := &launcherapi.GuestInterface{Name: in.Name, Mac: in.HardwareAdd}
		for _, fam := range []string{"ipv4", "ipv6"} {
			for _, a := range in.IPAddresses {
				if a.Type == fam {
					gi.Ips = append(gi.Ips, a.Address)
				}
			}
		}
		out.Interfaces = append(out.Interfaces, gi)
	}
	var users []user
	if err := optional(c.Execute(ctx, "guest-get-users", nil, &users)); err != nil {
		return nil, err
	}
	for _, u := range users {
		out.Users = append(out.Users, &launcherapi.GuestUser{Name: u.User, Domain: u.Domain, LoginTime: u.LoginTime})
	}
	var fss []fsInfo
	if err := optional(c.Execute(ctx, "guest-get-fsinfo", nil, &fss)); err != nil {
		return nil, err
	}
	for _, f := range fss {
		gf := &launcherapi.GuestFilesystem{DiskName: f.Name, MountPoint: f.Mountpoint, Type: f.Type}
		if f.UsedBytes != nil {
			gf.UsedBytes = *f.UsedBytes
		}
		if f.TotalBytes != nil {
			gf.TotalBytes = *f.TotalBytes
		}
		out.Filesystems = append(out.Filesystems, gf)
	}
	return out, nil
}

func isLoopback(in netInterface) bool {
	for _, a := range in.IPAddresses {
		if ip := net.ParseIP(a.Address); ip != nil && ip.IsLoopback() {
			return true
		}
	}
	return in.Name == "lo"
}

// isUnsupported reports a command the agent has but cannot run in this guest (qemu-ga answers
// GenericError, e.g. without /etc/os-release or utmp).
func isUnsupported(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Class == "GenericError"
}
