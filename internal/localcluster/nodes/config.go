package nodes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/qvirt/qvirt/internal/pki"
)

// The ports each node's components use, in the node's own network namespace.
const (
	kubeletPort        = 10250
	kubeletHealthzPort = 10248
	proxyHealthzPort   = 10256
	proxyMetricsPort   = 10249
)

// kubeletConfig is a KubeletConfiguration for this machine: cgroup v1 with the cgroupfs driver and a
// cgroup root of the node's own; webhook authentication and authorization, so kubectl logs, exec and
// port-forward go through RBAC; no iptables chains of the kubelet's own (kube-proxy writes the node's
// rules, in the node's network namespace). Pods are synced every 10 s (default 1 m), so that a
// changed Secret or ConfigMap reaches their volumes within seconds, as short certificate
// lifetimes in tests need.
func kubeletConfig(n *Node) string {
	p := n.paths
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
tlsCertFile: %[4]s
tlsPrivateKeyFile: %[5]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[7]s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[8]s
resolvConf: %[9]s
podLogsDir: /var/log/pods
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
maxPods: 110
syncFrequency: 10s
`, n.IP, kubeletPort, kubeletHealthzPort, filepath.Join(p.pkiDir(), "kubelet.crt"), filepath.Join(p.pkiDir(), "kubelet.key"),
		n.caFile, n.cgroupRoot(), p.containerdSocket(), p.resolvConf())
}

// containerdConfig is containerd v2's configuration: its own root, state and socket; oom_score_adj
// kept within what this machine's root may set; images pulled through the hosts in registryHosts.
func containerdConfig(n *Node, pauseImage string) string {
	p := n.paths
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[5]q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  # Devices (device plugins', Block volumes') belong to the container's user, as KubeVirt needs
  # for its non-root launchers.
  device_ownership_from_security_context = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[6]q
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
`, p.containerdRoot(), p.containerdState(), p.containerdSocket(), pauseImage, p.registryHosts(), n.opts.Runc,
		n.opts.CNIPluginDir, p.cniConfDir())
}

// registryHostsFile points pulls of one registry host at a plain-HTTP mirror, in containerd's
// hosts.toml format.
func registryHostsFile(endpoint string) string {
	return fmt.Sprintf(`server = %[1]q
[host.%[1]q]
  capabilities = ["pull", "resolve"]
`, endpoint)
}

// cniConfig is the node's pod network: one bridge, the node's pod subnet, and portmap.
func cniConfig(n *Node) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "qvirt-pods",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.PodSubnet.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": n.paths.cniIPAMDir(),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// proxyConfig is kube-proxy's configuration. It leaves the machine-wide conntrack settings alone
// (they are not the node's to change), and masquerades every Service connection so that replies
// from a pod on the same bridge come back through the node.
func proxyConfig(n *Node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
clusterCIDR: %[4]s
mode: iptables
iptables:
  masqueradeAll: true
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
healthzBindAddress: 127.0.0.1:%[5]d
metricsBindAddress: 127.0.0.1:%[6]d
`, kubeconfig, n.Name, n.IP, n.opts.Network.ClusterCIDR(), proxyHealthzPort, proxyMetricsPort)
}

// writeConfigs writes every file the node's processes read.
func (n *Node) writeConfigs(pauseImage string, mirrors map[string]string, serving pki.KeyPair, proxyKubeconfig string) error {
	p := n.paths
	for _, d := range []string{p.kubeletDir(), p.podLogDir(), p.qvirtRunDir(), p.containerdRoot(), p.containerdState(),
		p.registryHosts(), p.cniConfDir(), p.cniIPAMDir(), p.pkiDir(), p.logDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if _, _, err := serving.Write(p.pkiDir(), "kubelet"); err != nil {
		return err
	}
	cni, err := cniConfig(n)
	if err != nil {
		return err
	}
	files := map[string]string{
		p.kubeletConfig():    kubeletConfig(n),
		p.containerdConfig(): containerdConfig(n, pauseImage),
		p.proxyConfig():      proxyConfig(n, proxyKubeconfig),
		filepath.Join(p.cniConfDir(), "10-qvirt.conflist"): string(cni),
		// Pods get no name server: nothing outside the cluster's own addresses may be reached.
		p.resolvConf(): "options ndots:1\n",
	}
	for host, endpoint := range mirrors {
		dir := filepath.Join(p.registryHosts(), strings.ReplaceAll(host, "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		files[filepath.Join(dir, "hosts.toml")] = registryHostsFile(endpoint)
	}
	for path, content := range files {
		if err := pki.WriteFileAtomic(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
