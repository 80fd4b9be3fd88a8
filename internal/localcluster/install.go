package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubectl runs kubectl as admin against the cluster.
func (c *Cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := c.K8s.Kubectl(args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *Cluster) apply(ctx context.Context, path string) error {
	_, err := c.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", path)
	return err
}

// install gives the cluster its storage (deploy/storage/, not part of qvirt) and then installs
// qvirt as deploy/README.md says: operator.yaml, then the KubeVirt CR; virt-operator does the
// rest. It waits until the CR reports Available and each node is schedulable for VMs.
func (c *Cluster) install(ctx context.Context) error {
	deploy := filepath.Join(c.opts.Root, "deploy")
	if err := c.apply(ctx, filepath.Join(deploy, "storage")); err != nil {
		return err
	}
	// The VMs' namespace is a tenant's: Pod Security baseline enforced, restricted reported.
	if _, err := c.kubectl(ctx, "label", "--overwrite", "namespace", "default",
		"pod-security.kubernetes.io/enforce=baseline", "pod-security.kubernetes.io/warn=restricted"); err != nil {
		return err
	}
	if err := c.apply(ctx, filepath.Join(deploy, "operator.yaml")); err != nil {
		return err
	}
	if _, err := c.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(deploy, "crds")); err != nil {
		return err
	}
	began := time.Now()
	if _, err := c.kubectl(ctx, "apply", "-f", filepath.Join(deploy, "kubevirt-cr.yaml")); err != nil {
		return err
	}
	if err := c.waitInstalled(ctx); err != nil {
		return err
	}
	c.opts.Log.Info("qvirt installed", "fromKubeVirtCRToAvailableAndSchedulable", time.Since(began).Round(time.Millisecond))
	return nil
}

// waitInstalled waits for the storage provisioner and virt-operator to be available, the
// KubeVirt CR to report Available, the subresource API to be served, and every node to be
// schedulable for VMs.
func (c *Cluster) waitInstalled(ctx context.Context) error {
	c.progress("waiting for the storage provisioner, virt-operator and the components it installs")
	steps := []struct{ what, args string }{
		{"local-path-provisioner", "rollout status -n local-path-storage deployment/local-path-provisioner --timeout=5m"},
		{"virt-operator", "rollout status -n kubevirt deployment/virt-operator --timeout=5m"},
		{"the KubeVirt CR", "wait -n kubevirt kv/kubevirt --for=condition=Available --timeout=10m"},
		{"virt-api", "rollout status -n kubevirt deployment/virt-api --timeout=5m"},
		{"virt-controller", "rollout status -n kubevirt deployment/virt-controller --timeout=5m"},
		{"virt-handler", "rollout status -n kubevirt daemonset/virt-handler --timeout=5m"},
		{"the subresource API", "wait --for=condition=Available --timeout=2m apiservice/v1.subresources.kubevirt.io"},
	}
	for _, s := range steps {
		if _, err := c.kubectl(ctx, strings.Fields(s.args)...); err != nil {
			return fmt.Errorf("%s not ready: %w (pods: %s)", s.what, err, c.podSummary(ctx))
		}
	}
	return c.WaitSchedulable(ctx)
}

// WaitSchedulable waits for every node to be Ready and labelled schedulable for VMs by its
// virt-handler.
func (c *Cluster) WaitSchedulable(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range c.opts.Nodes {
			n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || n.Labels["kubevirt.io/schedulable"] != "true" || !nodeReady(n) {
				return false, nil
			}
		}
		return true, nil
	})
}

func (c *Cluster) podSummary(ctx context.Context) string {
	out, _ := c.kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == "node.kubernetes.io/not-ready" || t.Key == "node.kubernetes.io/unreachable" {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
