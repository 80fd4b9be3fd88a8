package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// TestNodeAgentIdentity: each node agent serves a certificate issued for its own node, and a
// node agent's credentials cannot obtain another node's certificate.
func TestNodeAgentIdentity(t *testing.T) {
	c := localStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := c.NodeNames()
	if len(nodes) < 2 {
		t.Skip("needs two nodes")
	}

	// The agents' own requests were approved for their nodes.
	csrs, err := c.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + nodeapi.SignerName})
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]bool{}
	for _, csr := range csrs.Items {
		if len(csr.Status.Certificate) == 0 {
			continue
		}
		issued[csr.Spec.Extra["authentication.kubernetes.io/node-name"][0]] = true
		// Serving, and the node's identity towards another node's agent.
		block, _ := pem.Decode(csr.Status.Certificate)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
			t.Errorf("the certificate of %s has extended usages %v", cert.Subject.CommonName, cert.ExtKeyUsage)
		}
	}
	for _, n := range nodes {
		if !issued[n] {
			t.Errorf("no node API certificate issued for %s (requests: %d)", n, len(csrs.Items))
		}
	}

	// With node A's agent token, ask for node B's name: denied, never signed.
	a, b := nodes[0], nodes[1]
	asAgentA := agentClient(t, ctx, c, a)
	forged := requestFor(t, ctx, asAgentA, b)
	got := waitDecided(t, ctx, c, forged)
	if !decided(got, certificatesv1.CertificateDenied) || len(got.Status.Certificate) > 0 {
		t.Fatalf("node %s's agent asked for %s's certificate: %+v", a, b, got.Status)
	}
	if msg := got.Status.Conditions[0].Message; !strings.Contains(msg, b) {
		t.Errorf("denial does not say why: %q", msg)
	}
	own := waitDecided(t, ctx, c, requestFor(t, ctx, asAgentA, a))
	if !decided(own, certificatesv1.CertificateApproved) {
		t.Fatalf("node %s's agent asking for its own name: %+v", a, own.Status)
	}

	// An endpoint annotation that is not https is refused by virt-api, with the reason.
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := node.Annotations[nodeapi.EndpointAnnotation]
	setEndpoint := func(ep string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodeapi.EndpointAnnotation: ep}}})
		if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	vmi, _, _, _ := guestWithConsole(t, c, "identity", a)
	setEndpoint(strings.Replace(orig, "https://", "http://", 1))
	defer setEndpoint(orig)
	path := "/apis/subresources.kubevirt.io/v1/namespaces/" + vmi.Namespace + "/virtualmachineinstances/" + vmi.Name + "/pause"
	res := c.Kube.CoreV1().RESTClient().Put().AbsPath(path).Body([]byte("{}")).Do(ctx)
	if err := res.Error(); err == nil || !strings.Contains(err.Error(), "only https") {
		t.Fatalf("pause through an http:// endpoint: %v", err)
	}
}

func requestFor(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: node}, DNSNames: []string{node}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := kube.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-node-identity-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: nodeapi.SignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	return csr.Name
}

func waitDecided(t *testing.T, ctx context.Context, c *localcluster.Cluster, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var got *certificatesv1.CertificateSigningRequest
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		csr, err := c.Kube.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = csr
		return decided(csr, certificatesv1.CertificateDenied) || len(csr.Status.Certificate) > 0, nil
	})
	if err != nil {
		t.Fatalf("request %s not decided: %v (%+v)", name, err, got)
	}
	return got
}

func decided(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestNodeAgentPatchesOnlyItsOwnNode: the agents share a service account, so the policy in
// deploy/node-restriction.yaml is what keeps one node's agent off another node's Node.
func TestNodeAgentPatchesOnlyItsOwnNode(t *testing.T) {
	c := localStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := c.NodeNames()
	if len(nodes) < 2 {
		t.Skip("needs two nodes")
	}
	a, b := nodes[0], nodes[1]
	asAgentA := agentClient(t, ctx, c, a)
	patch := []byte(`{"metadata":{"annotations":{"e2e.qvirt.io/touched":"yes"}}}`)
	if _, err := asAgentA.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("node agent patching its own Node: %v", err)
	}
	_, err := asAgentA.CoreV1().Nodes().Patch(ctx, b, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "only the Node it runs on") {
		t.Fatalf("node %s's agent patched node %s: %v", a, b, err)
	}
	unsched := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := asAgentA.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, unsched, metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "labels and annotations") {
		t.Fatalf("node agent changed its Node's spec: %v", err)
	}
	undo := []byte(`{"metadata":{"annotations":{"e2e.qvirt.io/touched":null}}}`)
	_, _ = c.Kube.CoreV1().Nodes().Patch(ctx, a, types.MergePatchType, undo, metav1.PatchOptions{})
}

// TestNodeAgentWritesOnlyItsOwnVMIsStatus: with its own pod-bound token, one node's agent may
// not change the status of a VMI on another node, and the agent of the VMI's node may not move
// it to another node (deploy/node-restriction.yaml).
func TestNodeAgentWritesOnlyItsOwnVMIsStatus(t *testing.T) {
	c := localStack(t)
	nodes := c.NodeNames()
	if len(nodes) < 2 {
		t.Skip("needs two nodes")
	}
	a, b := nodes[0], nodes[1]
	startVM(t, c, vmManifest("fenced", b, "masquerade"))
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", "fenced", "--wait=false").Run() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	patchAs := func(node, patch string) error {
		dyn, err := dynamic.NewForConfig(agentConfig(t, ctx, c, node))
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(gvr).Namespace("default").Patch(ctx, "fenced", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	err := patchAs(a, `{"status":{"reason":"hijacked"}}`)
	if err == nil || !strings.Contains(err.Error(), "only the status of VMIs on its node") {
		t.Errorf("node %s's agent changed the status of a VMI on %s: %v", a, b, err)
	}
	err = patchAs(b, `{"status":{"nodeName":"`+a+`"}}`)
	if err == nil || !strings.Contains(err.Error(), "may move a VMI only to its own node") {
		t.Errorf("node %s's agent moved its VMI to %s: %v", b, a, err)
	}
	// Nor may a node's agent take a VMI for itself without a completed migration to it.
	err = patchAs(a, `{"status":{"nodeName":"`+a+`"}}`)
	if err == nil || !strings.Contains(err.Error(), "only the status of VMIs on its node") {
		t.Errorf("node %s's agent took the VMI from %s: %v", a, b, err)
	}
	if vmi := getVMI(t, c, "fenced"); vmi.Status.NodeName != b || vmi.Status.Reason == "hijacked" {
		t.Errorf("the VMI's status changed: node %s, reason %q", vmi.Status.NodeName, vmi.Status.Reason)
	}
	// The agent of the VMI's node still writes its status: the VMI runs and reports pausing.
	putSub(t, c, "virtualmachineinstances/fenced/pause")
	waitCondition(t, ctx, c, "fenced", v1.VirtualMachineInstancePaused, corev1.ConditionTrue)
}

// agentClient is a client with the credentials of the node agent running on node: a token of
// its service account bound to its pod, as the kubelet mounts it.
func agentClient(t *testing.T, ctx context.Context, c *localcluster.Cluster, node string) kubernetes.Interface {
	t.Helper()
	kube, err := kubernetes.NewForConfig(agentConfig(t, ctx, c, node))
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// agentConfig is the REST configuration of agentClient.
func agentConfig(t *testing.T, ctx context.Context, c *localcluster.Cluster, node string) *rest.Config {
	t.Helper()
	pod := handlerPod(t, c, node)
	tr, err := c.Kube.CoreV1().ServiceAccounts(localcluster.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.K8s.RESTConfig())
	cfg.BearerToken = tr.Status.Token
	return cfg
}
