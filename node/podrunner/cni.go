package podrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// cniVersion is the newest spec version Debian's containernetworking-plugins (1.1.1) speak.
const cniVersion = "1.0.0"

// podIfName is the pod's interface, as under a kubelet.
const podIfName = "eth0"

// network attaches pods to the node's bridge through CNI. The bridge lives in the node's own
// network namespace and the plugins run there, so neither the bridge nor the host side of the
// veth pairs appear in the host's namespace, and nothing routes between pods and the outside.
type network struct {
	cni     *libcni.CNIConfig
	lo, pod *libcni.NetworkConfigList
}

func newNetwork(opts CNIOptions, nodeNetns, stateDir string) (*network, error) {
	if _, err := os.Stat(filepath.Join(opts.PluginDir, "bridge")); err != nil {
		return nil, fmt.Errorf("CNI plugins: %w (run `make cni`)", err)
	}
	podConf, err := json.Marshal(map[string]any{
		"cniVersion": cniVersion,
		"name":       opts.NetworkName,
		"plugins": []any{map[string]any{
			"type":   "bridge",
			"bridge": opts.Bridge,
			// The bridge holds the subnet's gateway address inside the node's namespace, so the
			// node reaches its pods (port-forward to a bridge-bound guest dials from there). The
			// node's namespace has no route further, so pods still reach nothing else.
			"isGateway": true,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": opts.Subnet}}},
				"dataDir": filepath.Join(stateDir, "cni", "ipam"),
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	pod, err := libcni.NetworkConfFromBytes(podConf)
	if err != nil {
		return nil, fmt.Errorf("pod network config: %w", err)
	}
	lo, err := libcni.NetworkConfFromBytes([]byte(`{"cniVersion":"` + cniVersion + `","name":"qvirt-loopback","plugins":[{"type":"loopback"}]}`))
	if err != nil {
		return nil, err
	}
	exec := &nsExec{netns: nodeNetns, raw: &invoke.RawExec{}}
	return &network{
		cni: libcni.NewCNIConfigWithCacheDir([]string{opts.PluginDir}, filepath.Join(stateDir, "cni", "cache"), exec),
		lo:  lo,
		pod: pod,
	}, nil
}

// runtimeConf is how CNI knows a pod: the same values for ADD and DEL.
func runtimeConf(sb *sandbox) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: string(sb.PodUID),
		NetNS:       netnsPath(sb.Netns),
		IfName:      podIfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", sb.Namespace},
			{"K8S_POD_NAME", sb.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", string(sb.PodUID)},
			{"K8S_POD_UID", string(sb.PodUID)},
		},
	}
}

// add attaches the pod and returns its addresses on eth0.
func (n *network) add(ctx context.Context, sb *sandbox) ([]string, error) {
	rt := runtimeConf(sb)
	loRT := *rt
	loRT.IfName = "lo"
	if _, err := n.cni.AddNetworkList(ctx, n.lo, &loRT); err != nil {
		return nil, fmt.Errorf("CNI ADD loopback: %w", err)
	}
	res, err := n.cni.AddNetworkList(ctx, n.pod, rt)
	if err != nil {
		return nil, fmt.Errorf("CNI ADD %s: %w", n.pod.Name, err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("CNI result: %w", err)
	}
	var ips []string
	for _, ip := range cur.IPs {
		if ip.Interface != nil && *ip.Interface < len(cur.Interfaces) && cur.Interfaces[*ip.Interface].Sandbox == "" {
			continue // the host side
		}
		ips = append(ips, ip.Address.IP.String())
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("CNI ADD %s gave no address for %s", n.pod.Name, podIfName)
	}
	// IPv4 first, as Kubernetes lists the primary family first.
	for i, ip := range ips {
		if net.ParseIP(ip).To4() != nil {
			ips[0], ips[i] = ips[i], ips[0]
			break
		}
	}
	return ips, nil
}

// del detaches the pod; it is idempotent and works after the namespace is gone (the plugins
// then only release the address).
func (n *network) del(ctx context.Context, sb *sandbox) error {
	rt := runtimeConf(sb)
	loRT := *rt
	loRT.IfName = "lo"
	return errors.Join(
		n.cni.DelNetworkList(ctx, n.pod, rt),
		n.cni.DelNetworkList(ctx, n.lo, &loRT),
	)
}

// nsExec runs CNI plugins inside the node's network namespace.
type nsExec struct {
	netns string
	raw   *invoke.RawExec
	version.PluginDecoder
}

func (e *nsExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var out []byte
	err := inNetns(e.netns, func() error {
		var err error
		out, err = e.raw.ExecPlugin(ctx, pluginPath, stdin, environ)
		return err
	})
	return out, err
}

func (e *nsExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}
