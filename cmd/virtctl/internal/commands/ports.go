package commands

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// forwardedPort is one [protocol/]local[:remote] argument of port-forward; local 0 asks for
// any free port.
type forwardedPort struct {
	local, remote int
	protocol      string
}

func parsePorts(args []string, protocol string) ([]forwardedPort, error) {
	ports := make([]forwardedPort, 0, len(args))
	for _, a := range args {
		p, err := parsePort(a, protocol)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

func parsePort(arg, protocol string) (forwardedPort, error) {
	p := forwardedPort{protocol: strings.ToLower(protocol)}
	if proto, rest, ok := strings.Cut(arg, "/"); ok {
		p.protocol, arg = strings.ToLower(proto), rest
	}
	if p.protocol != "tcp" && p.protocol != "udp" {
		return p, fmt.Errorf("unsupported protocol %q: tcp or udp", p.protocol)
	}
	local, remote, hasRemote := strings.Cut(arg, ":")
	var err error
	switch {
	case !hasRemote:
		if p.local, err = portNumber(local); err != nil {
			return p, err
		}
		p.remote = p.local
	case local == "":
		// kubectl's ":80": any local port.
		if p.remote, err = portNumber(remote); err != nil {
			return p, err
		}
	default:
		if p.local, err = portNumber(local); err != nil {
			return p, err
		}
		if p.remote, err = portNumber(remote); err != nil {
			return p, err
		}
	}
	return p, nil
}

func portNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return n, nil
}

// parseTarget reads type/name[/namespace] and returns the subresource path's resource.
func parseTarget(target string) (resource, name, namespace string, err error) {
	parts := strings.Split(target, "/")
	switch len(parts) {
	case 2:
	case 3:
		namespace = parts[2]
		if namespace == "" {
			return "", "", "", errors.New("namespace cannot be empty")
		}
	case 1:
		return "", "", "", errors.New("target must contain type and name separated by '/'")
	default:
		return "", "", "", errors.New("target is not valid with more than two '/'")
	}
	switch strings.ToLower(parts[0]) {
	case "vm", "vms", "virtualmachine", "virtualmachines":
		resource = kvclient.VirtualMachines
	case "vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances":
		resource = kvclient.VirtualMachineInstances
	default:
		return "", "", "", fmt.Errorf("unsupported resource type '%s'", parts[0])
	}
	if parts[1] == "" {
		return "", "", "", errors.New("name cannot be empty")
	}
	return resource, parts[1], namespace, nil
}
