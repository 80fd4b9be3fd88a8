package localcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/node/nodeapi"
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

// install gives the cluster its storage (deploy/storage/, not part of qvirt) and then follows
// deploy/README.md: namespace and CRDs, RBAC, the certificates as Secrets, virt-api with its
// webhooks and APIService (caBundle filled in), virt-controller, virt-handler, the KubeVirt CR; then
// it waits until every component runs and each node is schedulable for VMs.
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
	for _, f := range []string{"namespace.yaml", "crds"} {
		if err := c.apply(ctx, filepath.Join(deploy, f)); err != nil {
			return err
		}
	}
	if _, err := c.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(deploy, "crds")); err != nil {
		return err
	}
	for _, f := range []string{"rbac.yaml", "node-restriction.yaml"} {
		if err := c.apply(ctx, filepath.Join(deploy, f)); err != nil {
			return err
		}
	}
	if err := c.createCertificates(ctx); err != nil {
		return err
	}
	if err := c.apply(ctx, filepath.Join(deploy, "virt-api.yaml")); err != nil {
		return err
	}
	for _, f := range []string{"webhooks.yaml", "apiservice.yaml"} {
		out, err := c.withCABundle(filepath.Join(deploy, f))
		if err != nil {
			return err
		}
		if err := c.apply(ctx, out); err != nil {
			return err
		}
	}
	for _, f := range []string{"virt-controller.yaml", "virt-handler.yaml", "kubevirt-cr.yaml"} {
		if err := c.apply(ctx, filepath.Join(deploy, f)); err != nil {
			return err
		}
	}
	return c.waitInstalled(ctx)
}

// createCertificates issues qvirt's certificates from a CA of its own and stores them as the
// Secrets and the ConfigMap that deploy/README.md lists.
func (c *Cluster) createCertificates(ctx context.Context) error {
	var err error
	if c.CA, err = pki.NewCA("qvirt-ca", 7*24*time.Hour); err != nil {
		return err
	}
	ca := c.CA.CertPEM()
	apiServing, err := c.CA.Sign(pki.Request{CommonName: "virt-api", Server: true,
		DNSNames: []string{"virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local"}})
	if err != nil {
		return err
	}
	nodeClient, err := c.CA.Sign(pki.Request{CommonName: nodeapi.DefaultClientIdentity, Client: true})
	if err != nil {
		return err
	}
	// The node CA signs only node agents' serving certificates (virt-controller holds its key),
	// so it is not the CA that signs the webhooks' and virt-api's certificates.
	nodeCA, err := pki.NewCA("qvirt-node-ca", 7*24*time.Hour)
	if err != nil {
		return err
	}
	nodeCAKey, err := nodeCA.KeyPEM()
	if err != nil {
		return err
	}
	frontProxyCA, err := os.ReadFile(c.K8s.FrontProxyCA())
	if err != nil {
		return err
	}
	secrets := map[string]map[string][]byte{
		"kubevirt-virt-api-certs":       {"tls.crt": apiServing.CertPEM, "tls.key": apiServing.KeyPEM},
		"kubevirt-virt-api-node-client": {"tls.crt": nodeClient.CertPEM, "tls.key": nodeClient.KeyPEM, "ca.crt": nodeCA.CertPEM()},
		"kubevirt-virt-handler-certs":   {"ca.crt": ca, "node-ca.crt": nodeCA.CertPEM()},
		"kubevirt-node-ca":              {"tls.crt": nodeCA.CertPEM(), "tls.key": nodeCAKey},
	}
	for name, data := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}, Type: corev1.SecretTypeOpaque, Data: data}
		if _, err := c.Kube.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("secret %s: %w", name, err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "virt-api-requestheader-ca", Namespace: Namespace},
		Data: map[string]string{"ca.crt": string(frontProxyCA)}}
	if _, err := c.Kube.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("configmap %s: %w", cm.Name, err)
	}
	return nil
}

// withCABundle writes a copy of a deploy/ manifest with every caBundle (webhooks' clientConfig,
// an APIService's spec) set to qvirt's CA, and returns its path.
func (c *Cluster) withCABundle(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	bundle := base64.StdEncoding.EncodeToString(c.CA.CertPEM())
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---")) {
		if len(bytes.TrimSpace(d)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(d, &obj); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if obj == nil {
			continue
		}
		if hooks, ok := obj["webhooks"].([]any); ok {
			for _, h := range hooks {
				if cc, ok := h.(map[string]any)["clientConfig"].(map[string]any); ok {
					cc["caBundle"] = bundle
				}
			}
		}
		if spec, ok := obj["spec"].(map[string]any); ok && obj["kind"] == "APIService" {
			spec["caBundle"] = bundle
		}
		y, err := yaml.Marshal(obj)
		if err != nil {
			return "", err
		}
		out = append(out, y)
	}
	dst := filepath.Join(c.opts.Dir, "pki", filepath.Base(path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, bytes.Join(out, []byte("\n---\n")), 0o644)
}

// waitInstalled waits for the storage provisioner, virt-api and virt-controller to be available,
// virt-handler to run on every node, the subresource API to be served, and every node to be
// schedulable for VMs.
func (c *Cluster) waitInstalled(ctx context.Context) error {
	c.progress("waiting for the storage provisioner and the virt-api, virt-controller and virt-handler pods")
	steps := []struct{ what, args string }{
		{"local-path-provisioner", "rollout status -n local-path-storage deployment/local-path-provisioner --timeout=5m"},
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
