package nodes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/proc"
)

// Credentials issue the nodes' identities; the control plane implements them.
type Credentials interface {
	// UserConfig issues a client certificate and writes a kubeconfig for it.
	UserConfig(user string, groups ...string) (*rest.Config, string, error)
	// IssueServing signs a serving certificate that kube-apiserver trusts for kubelets.
	IssueServing(commonName string, dnsNames []string, ips []net.IP) (pki.KeyPair, error)
	// ClusterCA is the CA file kubelets verify client certificates with.
	ClusterCA() string
}

// Options configure the nodes of one local cluster.
type Options struct {
	// Dir holds one directory per node, and the saved machine settings.
	Dir   string
	Names []string
	Network
	// K8sBinDir holds kubelet and kube-proxy; ToolsDir containerd, its runc shim and ctr.
	K8sBinDir, ToolsDir string
	// Runc and CNIPluginDir default to Debian's /usr/sbin/runc and /usr/lib/cni.
	Runc, CNIPluginDir string
	// PauseImage is the pod sandbox image; it must be pullable through Mirrors.
	PauseImage string
	// Mirrors maps a registry host (docker.io, localhost:5000) to the plain-HTTP endpoint serving it.
	Mirrors     map[string]string
	Credentials Credentials
	// Admin is a client of the cluster, used to wait for the nodes to be Ready.
	Admin kubernetes.Interface
	Log   logr.Logger
}

// Node is one running node.
type Node struct {
	Name      string
	Index     int
	IP        netip.Addr
	PodSubnet netip.Prefix

	opts   *Options
	paths  paths
	caFile string

	spawner *proc.Spawner
	holder  *proc.Process
	// commands are the node's components, binary first, as run inside its namespaces; procs
	// the running ones, by the same names.
	commands map[string][]string
	procs    map[string]*proc.Process
}

// cgroupRoot is the kubelet's cgroupRoot: one per node, so two kubelets never manage each other's pods.
func (n *Node) cgroupRoot() string { return n.opts.Network.cgroupPrefix() + n.Name }

// KubeletDir is the host directory the node's processes and pods see as /var/lib/kubelet.
func (n *Node) KubeletDir() string { return n.paths.kubeletDir() }

// LogDir holds the node's process logs.
func (n *Node) LogDir() string { return n.paths.logDir() }

// PodLogDir is the node's /var/log/pods.
func (n *Node) PodLogDir() string { return n.paths.podLogDir() }

// ContainerdSocket is the node's containerd endpoint (for ctr or crictl).
func (n *Node) ContainerdSocket() string { return n.paths.containerdSocket() }

func (n *Node) prepare() error {
	p := n.paths
	if err := os.RemoveAll(p.join("holder.ready")); err != nil {
		return err
	}
	creds := n.opts.Credentials
	_, kubeconfig, err := creds.UserConfig("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return fmt.Errorf("node %s client certificate: %w", n.Name, err)
	}
	_, proxyKubeconfig, err := creds.UserConfig("system:kube-proxy")
	if err != nil {
		return fmt.Errorf("node %s kube-proxy certificate: %w", n.Name, err)
	}
	serving, err := creds.IssueServing("system:node:"+n.Name, []string{n.Name}, []net.IP{n.IP.AsSlice()})
	if err != nil {
		return fmt.Errorf("node %s serving certificate: %w", n.Name, err)
	}
	n.caFile = creds.ClusterCA()
	if err := n.writeConfigs(n.opts.PauseImage, n.opts.Mirrors, serving, proxyKubeconfig); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := createCgroupRoot(n.cgroupRoot()); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	k8s := n.opts.K8sBinDir
	n.commands = map[string][]string{
		"containerd": {filepath.Join(n.opts.ToolsDir, "containerd"), "--config", p.containerdConfig()},
		"kubelet": {filepath.Join(k8s, "kubelet"), "--config", p.kubeletConfig(), "--kubeconfig", kubeconfig,
			"--hostname-override", n.Name, "--node-ip", n.IP.String(), "--cert-dir", p.pkiDir(), "--v", "1"},
		"kube-proxy": {filepath.Join(k8s, "kube-proxy"), "--config", p.proxyConfig(), "--v", "1"},
	}
	n.procs = map[string]*proc.Process{}
	return nil
}

// startHolder creates the node's namespaces and links them to the bridge.
func (n *Node) startHolder(peers []netip.Addr) error {
	h, err := proc.StartProcess(n.spawner, n.Name+"-holder", "/usr/bin/unshare", filepath.Join(n.LogDir(), "holder.log"), n.holderArgs())
	if err != nil {
		return err
	}
	n.holder = h
	if err := n.waitHolder(10 * time.Second); err != nil {
		return err
	}
	return wireNode(n.opts.Network, n.Index, h.Pid(), peers)
}

// Start starts one of the node's components ("containerd", "kubelet", "kube-proxy"), e.g. again
// after Kill.
func (n *Node) Start(component string) error {
	cmd, ok := n.commands[component]
	if !ok {
		return fmt.Errorf("node %s has no component %q", n.Name, component)
	}
	p, err := proc.StartProcess(n.spawner, n.Name+"-"+component, "/usr/bin/nsenter", filepath.Join(n.LogDir(), component+".log"),
		n.nsenterArgs(cmd[0], cmd[1:]...))
	if err != nil {
		return err
	}
	n.procs[component] = p
	if component == "containerd" {
		return n.waitContainerd(p, time.Minute)
	}
	return nil
}

// Kill ends a component with SIGKILL, as a crash would; its containers keep running.
func (n *Node) Kill(component string) error {
	p := n.procs[component]
	if p == nil {
		return fmt.Errorf("node %s has no running %s", n.Name, component)
	}
	if err := p.Kill(); err != nil {
		return err
	}
	select {
	case <-p.Exited():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("node %s: %s did not exit after SIGKILL", n.Name, component)
	}
}

// Pid is a component's pid, 0 when it is not running.
func (n *Node) Pid(component string) int {
	if p := n.procs[component]; p != nil && p.Running() {
		return p.Pid()
	}
	return 0
}

func (n *Node) waitContainerd(p *proc.Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.DialTimeout("unix", n.paths.containerdSocket(), time.Second); err == nil {
			c.Close()
			return nil
		}
		if !p.Running() {
			return fmt.Errorf("node %s: containerd exited: %v (log %s)", n.Name, p.ExitError(), p.LogPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: containerd not answering after %s (log %s)", n.Name, timeout, p.LogPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits for the Node object to be Ready.
func (n *Node) waitReady(ctx context.Context) error {
	var last string
	for {
		node, err := n.opts.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		} else {
			last = err.Error()
		}
		for _, p := range []*proc.Process{n.procs["containerd"], n.procs["kubelet"]} {
			if p != nil && !p.Running() {
				return fmt.Errorf("node %s: %s exited: %v (log %s)", n.Name, p.Name, p.ExitError(), p.LogPath)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready (%s): %w (logs in %s)", n.Name, last, ctx.Err(), n.LogDir())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the node's processes, gently first, and then everything left in its namespaces and
// cgroups (shims, containers, QEMU).
func (n *Node) stop() error {
	var errs []error
	for _, p := range []*proc.Process{n.procs["kube-proxy"], n.procs["kubelet"], n.procs["containerd"]} {
		if p != nil && p.Running() {
			if err := p.Stop(5 * time.Second); err != nil && !isExitError(err) {
				errs = append(errs, err)
			}
		}
	}
	killPids(leftoverPids(n.paths.root, n.opts.ToolsDir))
	if n.holder != nil {
		_ = n.holder.Kill()
		<-n.holder.Exited()
	}
	if err := removeCgroupRoot(n.cgroupRoot()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func isExitError(err error) bool {
	var ee interface{ ExitCode() int }
	return errors.As(err, &ee)
}

// NetnsPath is the node's network namespace, from which pod IPs are reached as the node reaches them.
func (n *Node) NetnsPath() string { return fmt.Sprintf("/proc/%d/ns/net", n.holder.Pid()) }

// PodPids lists the processes of a pod on this node, from its cgroup (the kubelet's cgroupfs layout:
// <cgroupRoot>/kubepods[/<qos>]/pod<uid>/<container>).
func (n *Node) PodPids(podUID string) []int {
	var pids []int
	top := filepath.Join(cgroupMount, "pids", n.cgroupRoot())
	_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "pod"+podUID {
			pids = append(pids, cgroupPids(path)...)
			return filepath.SkipDir
		}
		return nil
	})
	return pids
}
