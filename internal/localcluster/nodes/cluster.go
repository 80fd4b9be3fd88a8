package nodes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qvirt/qvirt/internal/proc"
)

// Cluster is the running nodes of one local cluster.
type Cluster struct {
	opts    Options
	Nodes   []*Node
	spawner *proc.Spawner
}

func (o *Options) defaults() error {
	if o.Dir == "" || len(o.Names) == 0 || o.K8sBinDir == "" || o.ToolsDir == "" || o.PauseImage == "" ||
		o.Credentials == nil || o.Admin == nil {
		return errors.New("nodes: Dir, Names, K8sBinDir, ToolsDir, PauseImage, Credentials and Admin are required")
	}
	if len(o.Names) > 200 {
		return fmt.Errorf("nodes: %d nodes, at most 200", len(o.Names))
	}
	if o.Runc == "" {
		o.Runc = "/usr/sbin/runc"
	}
	if o.CNIPluginDir == "" {
		o.CNIPluginDir = "/usr/lib/cni"
	}
	for _, f := range []string{filepath.Join(o.K8sBinDir, "kubelet"), filepath.Join(o.K8sBinDir, "kube-proxy"),
		filepath.Join(o.ToolsDir, "containerd"), filepath.Join(o.ToolsDir, "containerd-shim-runc-v2"), o.Runc,
		filepath.Join(o.CNIPluginDir, "bridge"), "/usr/bin/unshare", "/usr/bin/nsenter", "/usr/sbin/iptables"} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("nodes: %w (run `make nodes`)", err)
		}
	}
	return nil
}

// Start brings every node up and returns once all are Ready. On error what was started is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, spawner: proc.NewSpawner()}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	o := &c.opts
	began := time.Now()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if err := saveSysctls(filepath.Join(o.Dir, "sysctls.json")); err != nil {
		return fmt.Errorf("nodes: saving kernel settings: %w", err)
	}
	if err := prepareVMNodeSysctls(); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	if err := ensureBridge(o.Network); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	var peers []netip.Addr
	for i, name := range o.Names {
		n := &Node{Name: name, Index: i, IP: o.Network.NodeAddr(i), PodSubnet: o.Network.PodSubnet(i),
			opts: o, paths: paths{root: filepath.Join(o.Dir, name)}, spawner: c.spawner}
		c.Nodes = append(c.Nodes, n)
		peers = append(peers, n.IP)
	}
	for _, n := range c.Nodes {
		if err := n.prepare(); err != nil {
			return err
		}
		if err := n.startHolder(peers); err != nil {
			return err
		}
		for _, comp := range []string{"containerd", "kubelet", "kube-proxy"} {
			if err := n.Start(comp); err != nil {
				return err
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, n := range c.Nodes {
		if err := n.waitReady(ctx); err != nil {
			return err
		}
	}
	o.Log.Info("nodes ready", "nodes", o.Names, "elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

// Node finds a node by name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Stop ends every node and undoes what the nodes changed on the machine: the bridge with its links
// and routes, the cgroups, the kernel settings the kubelets changed.
func (c *Cluster) Stop() error {
	var errs []error
	for _, n := range c.Nodes {
		if err := n.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	c.spawner.Stop()
	errs = append(errs, Sweep(c.opts.Dir, c.opts.ToolsDir, c.opts.Network))
	return errors.Join(errs...)
}

// Sweep removes what a run rooted at dir left behind when it could not stop its nodes (it was
// killed): their processes, containers and cgroups, the bridge, and the changed kernel settings.
// Nothing of the kind left, it does nothing.
func Sweep(dir, toolsDir string, nw Network) error {
	dir = filepath.Clean(dir)
	killPids(leftoverPids(dir, filepath.Clean(toolsDir)))
	var errs []error
	ctrls, err := hierarchies(true)
	if err != nil {
		errs = append(errs, err)
	}
	roots := map[string]bool{}
	for _, ctl := range ctrls {
		matches, _ := filepath.Glob(filepath.Join(cgroupMount, ctl, strings.TrimPrefix(nw.cgroupPrefix(), "/")+"*"))
		for _, m := range matches {
			roots["/"+filepath.Base(m)] = true
		}
	}
	for r := range roots {
		if err := removeCgroupRoot(r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := deleteBridge(nw); err != nil {
		errs = append(errs, fmt.Errorf("bridge %s: %w", nw.Bridge(), err))
	}
	if err := restoreSysctls(filepath.Join(dir, "sysctls.json")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
