// Package localcluster runs a real Kubernetes cluster on one machine and installs qvirt on it the
// way a user installs it on theirs: the control plane (controlplane), nodes that are real kubelets
// with containerd (nodes), an OCI registry the nodes pull from (registry), images built from bin/
// (ociimages), a storage provisioner with a default StorageClass (deploy/storage/, the cluster's
// storage and not qvirt's), and then deploy/'s manifests, whose pods are virt-api, virt-controller
// and virt-handler. `make run`, `make up` and the end-to-end tests bring it up this way.
//
// Nothing here is product code: control/, node/ and launcher/ never import it.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/localcluster/nodes"
	"github.com/qvirt/qvirt/internal/localcluster/registry"
	"github.com/qvirt/qvirt/internal/pki"
)

// Namespace is where qvirt's components and the KubeVirt CR live.
const Namespace = "kubevirt"

// Registry ports on the host's bridge address: the open registry every node pulls from, and one
// that asks for credentials (for pulls with imagePullSecrets).
const (
	RegistryPort        = 5000
	PrivateRegistryPort = 5001
	// PrivateUser and PrivatePassword are the private registry's only account.
	PrivateUser     = "qvirt"
	PrivatePassword = "local-registry-password"
)

// Options describe a local cluster.
type Options struct {
	// Root is the repository (deploy/ is read from it). Dir holds all state; default Root/_local.
	Root, Dir string
	// BinDir holds qvirt's binaries (default Root/bin); GuestDir the test guest (default Root/_guest);
	// ToolsDir the built Kubernetes, containerd and registry (default Root/_tools).
	BinDir, GuestDir, ToolsDir string
	// Nodes are the nodes' names (default node01, node02).
	Nodes []string
	// NetworkIndex keeps clusters on one machine apart (bridge, addresses, cgroups).
	NetworkIndex int
	Log          logr.Logger
	// Progress receives one line per step for a person watching; nil discards.
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Dir == "" {
		o.Dir = filepath.Join(o.Root, "_local")
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(o.Root, "bin")
	}
	if o.GuestDir == "" {
		o.GuestDir = filepath.Join(o.Root, "_guest")
	}
	if o.ToolsDir == "" {
		o.ToolsDir = filepath.Join(o.Root, "_tools")
	}
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"node01", "node02"}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	Network nodes.Network
	K8s     *controlplane.Cluster
	Kube    kubernetes.Interface
	Nodes   *nodes.Cluster
	// Registry is what every node pulls from; Private asks for PrivateUser's credentials.
	Registry, Private *registry.Registry
}

// Kubeconfig is the admin kubeconfig (Dir/kubeconfig).
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.opts.Dir, "kubeconfig") }

// LogDir holds the logs of the processes running on the host.
func (c *Cluster) LogDir() string { return filepath.Join(c.opts.Dir, "logs") }

// RegistryAddr is where images are pushed for the nodes (host:port on the bridge). The nodes pull
// them as localhost:5000/<repository> (and docker.io/<repository>).
func (c *Cluster) RegistryAddr() string {
	return net.JoinHostPort(c.Network.HostAddr().String(), fmt.Sprint(RegistryPort))
}

// PrivateRegistryAddr is the registry that needs credentials; nodes pull from it as localhost:5001.
func (c *Cluster) PrivateRegistryAddr() string {
	return net.JoinHostPort(c.Network.HostAddr().String(), fmt.Sprint(PrivateRegistryPort))
}

// VMDir is the host directory of a launcher pod's VM directory (its vm-dir emptyDir) on node.
func (c *Cluster) VMDir(node string, pod types.UID) string {
	return c.NodeKubeletPath(node, filepath.Join("/var/lib/kubelet/pods", string(pod), "volumes", "kubernetes.io~empty-dir", "vm-dir"))
}

// NodeKubeletPath is the host path of a path under /var/lib/kubelet on node (where the local
// storage provisioner's volumes are), "" when node is unknown or p is elsewhere.
func (c *Cluster) NodeKubeletPath(node, p string) string {
	n := c.Nodes.Node(node)
	rel, err := filepath.Rel("/var/lib/kubelet", p)
	if n == nil || err != nil || !filepath.IsLocal(rel) {
		return ""
	}
	return filepath.Join(n.KubeletDir(), rel)
}

func (c *Cluster) progress(format string, a ...any) {
	fmt.Fprintf(c.opts.Progress, ">> "+format+"\n", a...)
	c.opts.Log.Info(fmt.Sprintf(format, a...))
}

// NodesDir holds one directory per node (its logs, kubelet and containerd state).
func (c *Cluster) NodesDir() string { return filepath.Join(c.opts.Dir, "nodes") }

// Root is the repository the cluster was built from (deploy/, bin/).
func (c *Cluster) Root() string { return c.opts.Root }

// NodeNames are the nodes' names.
func (c *Cluster) NodeNames() []string { return append([]string(nil), c.opts.Nodes...) }

// Up brings the cluster up and returns when qvirt's components are ready. On error, what was
// started is torn down again.
func Up(ctx context.Context, o Options) (*Cluster, error) {
	o.defaults()
	c := &Cluster{opts: o, Network: nodes.Network{Index: o.NetworkIndex}}
	if err := c.up(ctx); err != nil {
		return nil, errors.Join(err, c.Down(context.Background()))
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context) error {
	o := c.opts
	began := time.Now()
	// Every run starts from a clean slate: nothing of an earlier run, crashed or not, is reused.
	if err := Sweep(o.Dir, o.ToolsDir, o.NetworkIndex); err != nil {
		return fmt.Errorf("cleaning up an earlier run: %w", err)
	}
	for _, d := range []string{"cluster", "nodes", "registry", "pki", "logs"} {
		if err := os.RemoveAll(filepath.Join(o.Dir, d)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.LogDir(), 0o755); err != nil {
		return err
	}
	if err := c.checkInputs(); err != nil {
		return err
	}
	if err := c.Network.CreateBridge(); err != nil {
		return err
	}
	c.progress("starting the Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) on %s", c.Network.HostAddr())
	k8s, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(o.Dir, "cluster"), BinDir: filepath.Join(o.ToolsDir, "k8s"),
		BindAddress: c.Network.HostAddr().String(), Log: o.Log.WithName("k8s")})
	if err != nil {
		return err
	}
	c.K8s = k8s
	if err := copyFile(k8s.Kubeconfig(), c.Kubeconfig()); err != nil {
		return err
	}
	if c.Kube, err = kubernetes.NewForConfig(k8s.RESTConfig()); err != nil {
		return err
	}
	c.progress("starting the OCI registries on %s and %s", c.RegistryAddr(), c.PrivateRegistryAddr())
	if err := c.startRegistries(ctx); err != nil {
		return err
	}
	c.progress("building qvirt's images from %s and pushing them", o.BinDir)
	if err := c.pushImages(ctx); err != nil {
		return err
	}
	c.progress("starting nodes %s (kubelet, containerd, kube-proxy)", strings.Join(o.Nodes, ", "))
	nc, err := nodes.Start(ctx, nodes.Options{
		Dir: c.NodesDir(), Names: o.Nodes, Network: c.Network,
		K8sBinDir: filepath.Join(o.ToolsDir, "k8s"), ToolsDir: filepath.Join(o.ToolsDir, "node"),
		PauseImage: "localhost:5000/" + PauseImage,
		Mirrors: map[string]string{
			"localhost:5000": "http://" + c.RegistryAddr(),
			"docker.io":      "http://" + c.RegistryAddr(),
			"localhost:5001": "http://" + c.PrivateRegistryAddr(),
		},
		Credentials: k8s, Admin: c.Kube, Log: o.Log.WithName("nodes"),
	})
	if err != nil {
		return err
	}
	c.Nodes = nc
	c.progress("installing qvirt from deploy/")
	if err := c.install(ctx); err != nil {
		return err
	}
	c.progress("cluster ready in %s", time.Since(began).Round(100*time.Millisecond))
	return nil
}

func (c *Cluster) checkInputs() error {
	o := c.opts
	for _, b := range []string{"virt-operator", "virt-api", "virt-controller", "virt-handler", "virt-launcher", "qvirt-pause"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("%s not built (run `make build`): %w", b, err)
		}
	}
	if _, err := os.Stat(c.localPathProvisionerBinary()); err != nil {
		return fmt.Errorf("the storage provisioner is not built (run `make storage-tools`): %w", err)
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "disk.qcow2"} {
		if _, err := os.Stat(filepath.Join(o.GuestDir, f)); err != nil {
			return fmt.Errorf("test guest missing (run `make guest`): %w", err)
		}
	}
	return nil
}

func (c *Cluster) startRegistries(ctx context.Context) error {
	bin := filepath.Join(c.opts.ToolsDir, "node", "registry")
	var err error
	c.Registry, err = registry.Start(ctx, registry.Options{Binary: bin, Addr: c.RegistryAddr(),
		Dir: filepath.Join(c.opts.Dir, "registry", "open"), LogPath: filepath.Join(c.LogDir(), "registry.log"), Log: c.opts.Log})
	if err != nil {
		return err
	}
	c.Private, err = registry.Start(ctx, registry.Options{Binary: bin, Addr: c.PrivateRegistryAddr(),
		Dir: filepath.Join(c.opts.Dir, "registry", "private"), LogPath: filepath.Join(c.LogDir(), "registry-private.log"),
		Htpasswd: map[string]string{PrivateUser: PrivatePassword}, Log: c.opts.Log})
	return err
}

// Down deletes every VM (each launcher shuts its guest down with its grace period), stops the
// nodes, the registries and the control plane, and undoes what they changed on the machine.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	if c.Nodes != nil && c.Kube != nil {
		c.progress("deleting VMs and waiting for their pods to go")
		if err := c.DeleteVMs(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Nodes != nil {
		if err := c.Nodes.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range []*registry.Registry{c.Registry, c.Private} {
		if r != nil {
			if err := r.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.K8s != nil {
		if err := c.K8s.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, Sweep(c.opts.Dir, c.opts.ToolsDir, c.opts.NetworkIndex))
	c.progress("local cluster stopped")
	return errors.Join(errs...)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(to, b, 0o600)
}
