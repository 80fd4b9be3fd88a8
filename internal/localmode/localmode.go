// Package localmode runs the whole of qvirt on one machine: a real Kubernetes control plane,
// virt-api and virt-controller replicas, and one virt-handler per simulated node running the
// launcher pods itself. `make run` / `make up` and the end-to-end tests bring it up this way.
package localmode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/proc"
)

// Options describe a local cluster.
type Options struct {
	// Root is the repository (deploy/ is read from it). Dir holds all state; default Root/_local.
	Root, Dir string
	// BinDir holds qvirt's binaries (default Root/bin); GuestDir the test guest and its image
	// store (default Root/_guest).
	BinDir, GuestDir string
	// Nodes are the simulated nodes (default node01, node02).
	Nodes []string
	// VirtAPIReplicas and ControllerReplicas default to 2.
	VirtAPIReplicas, ControllerReplicas int
	Log                                 logr.Logger
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
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"node01", "node02"}
	}
	if o.VirtAPIReplicas == 0 {
		o.VirtAPIReplicas = 2
	}
	if o.ControllerReplicas == 0 {
		o.ControllerReplicas = 2
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	K8s     *controlplane.Cluster
	CA      *pki.CA
	spawner *proc.Spawner

	mu    sync.Mutex
	procs map[string]*component

	// VirtAPIPort is the port every virt-api replica shares.
	VirtAPIPort int
	// HandlerMetrics maps each node to its virt-handler's /metrics address.
	HandlerMetrics map[string]string
}

// component is one of qvirt's processes, restartable with the same arguments.
type component struct {
	name, binary string
	args         []string
	p            *proc.Process
}

// Kubeconfig is the admin kubeconfig (Dir/kubeconfig).
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.opts.Dir, "kubeconfig") }

// LogDir holds one log per component.
func (c *Cluster) LogDir() string { return filepath.Join(c.opts.Dir, "logs") }

// VMDirRoot holds the per-VM directories of every node.
func (c *Cluster) VMDirRoot() string { return filepath.Join(c.opts.Dir, "vms") }

func (c *Cluster) progress(format string, a ...any) {
	fmt.Fprintf(c.opts.Progress, ">> "+format+"\n", a...)
	c.opts.Log.Info(fmt.Sprintf(format, a...))
}

// Up brings the cluster up and returns when every component is ready. On error, what was
// started is torn down again.
func Up(ctx context.Context, o Options) (*Cluster, error) {
	o.defaults()
	c := &Cluster{opts: o, procs: map[string]*component{}, HandlerMetrics: map[string]string{}}
	if err := c.up(ctx); err != nil {
		return nil, errors.Join(err, c.Down(context.Background()))
	}
	return c, nil
}

func (c *Cluster) up(ctx context.Context) error {
	o := c.opts
	began := time.Now()
	// Every run starts from a clean slate: no VM, pod or certificate of an earlier run.
	if err := Sweep(o.Dir, o.Nodes); err != nil {
		return fmt.Errorf("cleaning up an earlier run: %w", err)
	}
	for _, d := range []string{"cluster", "nodes", "vms", "pki", "logs"} {
		if err := os.RemoveAll(filepath.Join(o.Dir, d)); err != nil {
			return err
		}
	}
	for _, d := range []string{o.Dir, c.LogDir(), c.VMDirRoot()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, b := range []string{"virt-api", "virt-controller", "virt-handler", "virt-launcher"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("%s not built (run `make build`): %w", b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.GuestDir, "images", "index.json")); err != nil {
		return fmt.Errorf("guest images missing (run `make guest`): %w", err)
	}
	c.progress("starting the Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)")
	k8s, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(o.Dir, "cluster"), Log: o.Log.WithName("k8s")})
	if err != nil {
		return err
	}
	c.K8s = k8s
	if err := copyFile(k8s.Kubeconfig(), c.Kubeconfig()); err != nil {
		return err
	}
	c.progress("installing qvirt's CRDs and RBAC")
	if err := c.install(ctx); err != nil {
		return err
	}
	ids, err := c.identities()
	if err != nil {
		return err
	}
	c.spawner = proc.NewSpawner()
	c.progress("starting virt-api x%d", o.VirtAPIReplicas)
	if err := c.startVirtAPI(ids); err != nil {
		return err
	}
	if err := RegisterVirtAPI(ctx, k8s.RESTConfig(), filepath.Join(o.Root, "deploy"), c.VirtAPIPort, c.CA.CertPEM()); err != nil {
		return fmt.Errorf("registering virt-api: %w (see %s)", err, c.LogDir())
	}
	c.progress("starting virt-controller x%d (leader election)", o.ControllerReplicas)
	if err := c.startControllers(ids); err != nil {
		return err
	}
	c.progress("starting virt-handler on %s", strings.Join(o.Nodes, ", "))
	if err := c.startHandlers(ids); err != nil {
		return err
	}
	if err := c.applyKubeVirt(ctx); err != nil {
		return err
	}
	if err := c.waitNodes(ctx); err != nil {
		return err
	}
	c.progress("cluster ready in %s", time.Since(began).Round(100*time.Millisecond))
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(to, b, 0o600)
}
