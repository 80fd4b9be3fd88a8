package localmode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
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

// install applies deploy/'s namespace, CRDs and RBAC, as on a real cluster.
func (c *Cluster) install(ctx context.Context) error {
	deploy := filepath.Join(c.opts.Root, "deploy")
	for _, f := range []string{"namespace.yaml", "crds", "rbac.yaml"} {
		if _, err := c.kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(deploy, f)); err != nil {
			return err
		}
	}
	_, err := c.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(deploy, "crds"))
	return err
}

// applyKubeVirt configures qvirt: guests run under emulation, since KVM is not usable here.
func (c *Cluster) applyKubeVirt(ctx context.Context) error {
	cr := `apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: ` + Namespace + `}
spec:
  configuration:
    developerConfiguration:
      useEmulation: true
      featureGates: [HostDisk]
`
	f := filepath.Join(c.opts.Dir, "kubevirt-cr.yaml")
	if err := os.WriteFile(f, []byte(cr), 0o644); err != nil {
		return err
	}
	_, err := c.kubectl(ctx, "apply", "-f", f)
	return err
}

// waitNodes waits until every node is Ready and schedulable (the node lifecycle controller
// taints new nodes not-ready for a few seconds).
func (c *Cluster) waitNodes(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(c.K8s.RESTConfig())
	if err != nil {
		return err
	}
	c.progress("waiting for nodes %s to be Ready", strings.Join(c.opts.Nodes, ", "))
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range c.opts.Nodes {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeReady(n) {
				return false, c.componentsAlive()
			}
		}
		return true, nil
	})
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
