package localmode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/node/podrunner"
)

// Down deletes every VM (so each launcher shuts its guest down and its pod is torn down by the
// node agent), stops the components and the control plane, and finally sweeps anything left
// behind by a component that could not clean up: processes, network namespaces.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	if c.K8s != nil && c.running("virt-handler-"+c.opts.Nodes[0]) {
		c.progress("deleting VMs and waiting for their pods to go")
		if err := c.deleteVMs(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.mu.Lock()
	comps := make([]*component, 0, len(c.procs))
	for _, comp := range c.procs {
		comps = append(comps, comp)
	}
	c.mu.Unlock()
	for _, comp := range comps {
		if comp.p != nil {
			if err := comp.p.Stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.spawner != nil {
		c.spawner.Stop()
	}
	if c.K8s != nil {
		if err := c.K8s.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, Sweep(c.opts.Dir, c.opts.Nodes))
	c.progress("local cluster stopped")
	return errors.Join(errs...)
}

func (c *Cluster) running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	comp := c.procs[name]
	return comp != nil && comp.p != nil && comp.p.Running()
}

func (c *Cluster) deleteVMs(ctx context.Context) error {
	cfg := c.K8s.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, res := range []string{"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"} {
		gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: res}
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, o := range list.Items {
			_ = dyn.Resource(gvr).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// Sweep removes what a local cluster in dir may have left: processes running from dir (launchers
// and their QEMUs survive a node agent on purpose), the nodes' and pods' network namespaces. It is
// safe to run on a clean machine, and is what `make down` falls back to when no cluster answers.
func Sweep(dir string, nodes []string) error {
	var errs []error
	abs, _ := filepath.Abs(dir)
	for _, pid := range processesUsing(abs) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "qvpod-") && podStateExists(abs, strings.TrimPrefix(e.Name(), "qvpod-")) {
			errs = append(errs, deleteNetns(e.Name()))
		}
	}
	for _, n := range nodes {
		errs = append(errs, podrunner.RemoveNodeNetwork(n))
	}
	return errors.Join(errs...)
}

// podStateExists tells whether a pod namespace belongs to this cluster (its runner kept state).
func podStateExists(dir, uid string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "pods", uid+"*"))
	return len(matches) > 0
}

func deleteNetns(name string) error {
	p := filepath.Join("/run/netns", name)
	if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// processesUsing lists processes whose command line mentions dir, other than this one.
func processesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}
