package nodes

import (
	"fmt"
	"net/netip"
	"path/filepath"
)

// Network is the address plan of one local cluster. Index keeps two clusters on one machine (make
// run and the end-to-end suite) apart: every name and range below depends on it.
type Network struct {
	Index int
}

// Bridge is the host bridge the nodes are attached to.
func (n Network) Bridge() string { return fmt.Sprintf("qvbr%d", n.Index) }

// HostAddr is the host's address on the bridge: kube-apiserver and the registry listen on it.
func (n Network) HostAddr() netip.Addr { return netip.AddrFrom4([4]byte{10, 233, byte(n.Index), 1}) }

// HostPrefix is the bridge's subnet with the host's address.
func (n Network) HostPrefix() netip.Prefix { return netip.PrefixFrom(n.HostAddr(), 24) }

// NodeAddr is node i's InternalIP.
func (n Network) NodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 233, byte(n.Index), byte(11 + i)})
}

// ClusterCIDR holds every node's pod subnet.
func (n Network) ClusterCIDR() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(244 + n.Index), 0, 0}), 16)
}

// PodSubnet is node i's pod subnet.
func (n Network) PodSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(244 + n.Index), byte(i + 1), 0}), 24)
}

// hostVeth names node i's end of its link on the host (at most 15 bytes).
func (n Network) hostVeth(i int) string { return fmt.Sprintf("qvn%d-%d", n.Index, i) }

// cgroupPrefix starts the name of every node's cgroupRoot.
func (n Network) cgroupPrefix() string { return fmt.Sprintf("/qvirt%d-", n.Index) }

// paths are one node's directories and files on the host. Inside the node's mount namespace
// kubelet sees kubeletDir as /var/lib/kubelet, podLogDir as /var/log/pods and vmDir as /run/qvirt.
type paths struct{ root string }

func (p paths) join(elem ...string) string {
	return filepath.Join(append([]string{p.root}, elem...)...)
}
func (p paths) kubeletDir() string       { return p.join("kubelet") }
func (p paths) podLogDir() string        { return p.join("pod-logs") }
func (p paths) qvirtRunDir() string      { return p.join("qvirt-run") }
func (p paths) containerdRoot() string   { return p.join("containerd", "root") }
func (p paths) containerdState() string  { return p.join("containerd", "state") }
func (p paths) containerdSocket() string { return p.join("containerd", "containerd.sock") }
func (p paths) containerdConfig() string { return p.join("containerd", "config.toml") }
func (p paths) registryHosts() string    { return p.join("containerd", "certs.d") }
func (p paths) cniConfDir() string       { return p.join("cni", "net.d") }
func (p paths) cniIPAMDir() string       { return p.join("cni", "ipam") }
func (p paths) pkiDir() string           { return p.join("pki") }
func (p paths) kubeletConfig() string    { return p.join("kubelet-config.yaml") }
func (p paths) proxyConfig() string      { return p.join("kube-proxy-config.yaml") }
func (p paths) resolvConf() string       { return p.join("resolv.conf") }
func (p paths) logDir() string           { return p.join("logs") }
