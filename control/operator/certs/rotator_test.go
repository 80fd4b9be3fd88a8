package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
)

// snapshot is what a component could have read at one moment.
type snapshot struct {
	at     time.Time
	bundle *x509.CertPool
	cas    int
	leaves []*x509.Certificate
}

// TestRotationNeverLeavesAClientWithoutTheServersIssuer runs the rotator against a real
// kube-apiserver with lifetimes of seconds (CA 40 s renewed 20 s before its end, servers 10 s
// renewed 5 s before) through a whole CA rotation. Components read Secrets and the bundle late
// (up to the propagation time), so at every pair of moments no farther apart than that, a
// client holding the older bundle must accept the newer certificates and a client holding the
// newer bundle the older ones. The bundle reaches the webhook configuration and the APIService.
func TestRotationNeverLeavesAClientWithoutTheServersIssuer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	cp := controlplane.ForTest(t, controlplane.Options{Log: testr.New(t)})
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000 // client-go's default 5/s would space the moments out too far
	kube := kubernetes.NewForConfigOrDie(cfg)
	agg := aggregator.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns = "kubevirt"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "virt-api", Path: ptr.To("/validate")}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-api-validator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "vmi.kubevirt.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1.subresources.kubevirt.io"},
		Spec: apiregv1.APIServiceSpec{Group: "subresources.kubevirt.io", Version: "v1", Service: &apiregv1.ServiceReference{Namespace: ns, Name: "virt-api"},
			GroupPriorityMinimum: 1000, VersionPriority: 15},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const propagation = 3 * time.Second
	r := &Rotator{Kube: kube, Aggregator: agg, Namespace: ns, Propagation: propagation,
		Config: Config{CADuration: 40 * time.Second, CARenewBefore: 20 * time.Second, ServerDuration: 10 * time.Second, ServerRenewBefore: 5 * time.Second},
		Leaves: []LeafSpec{
			{Secret: "kubevirt-virt-api-certs", Request: pki.Request{CommonName: "virt-api", Server: true, DNSNames: []string{"virt-api.kubevirt.svc"}}},
			{Secret: "kubevirt-virt-handler-server-certs", Request: pki.Request{CommonName: "virt-handler", Server: true}},
		},
		ValidatingWebhooks: []string{"virt-api-validator"}, APIServices: []string{"v1.subresources.kubevirt.io"},
	}

	var snaps []snapshot
	maxCAs, issued := 0, map[string]bool{}
	for end := time.Now().Add(50 * time.Second); time.Now().Before(end); {
		next, err := r.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := read(t, kube, r)
		snaps = append(snaps, s)
		maxCAs = max(maxCAs, s.cas)
		for _, l := range s.leaves {
			issued[l.SerialNumber.String()] = true
		}
		wait := time.Until(next)
		time.Sleep(min(max(wait, 0), 250*time.Millisecond))
	}
	last := snaps[len(snaps)-1]
	if maxCAs < 2 || last.cas != 1 {
		t.Errorf("the bundle held at most %d CAs and ends with %d: want a rotation (2) that ends with one", maxCAs, last.cas)
	}
	if len(issued) < 8 {
		t.Errorf("%d server certificates over 50 s of 10 s lifetimes, want them renewed", len(issued))
	}
	failures, pairs := 0, 0
	for i, a := range snaps {
		for _, b := range snaps[i+1:] {
			if b.at.Sub(a.at) > propagation-250*time.Millisecond {
				break
			}
			pairs++
			for _, l := range b.leaves {
				failures += verifyErr(t, l, a.bundle, b.at, "an older bundle, a newer certificate")
			}
			for _, l := range a.leaves {
				failures += verifyErr(t, l, b.bundle, b.at, "a newer bundle, an older certificate")
			}
		}
	}
	if failures > 0 || pairs < len(snaps) {
		t.Errorf("%d failed verifications over %d pairs of %d moments (want none failed, and each moment compared with its neighbours)", failures, pairs, len(snaps))
	}

	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, BundleConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "virt-api-validator", metav1.GetOptions{})
	if err != nil || string(w.Webhooks[0].ClientConfig.CABundle) != cm.Data[BundleKey] {
		t.Errorf("webhook caBundle differs from the bundle (%v)", err)
	}
	a, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
	if err != nil || string(a.Spec.CABundle) != cm.Data[BundleKey] {
		t.Errorf("APIService caBundle differs from the bundle (%v)", err)
	}
}

func read(t *testing.T, kube kubernetes.Interface, r *Rotator) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{at: time.Now(), bundle: x509.NewCertPool()}
	cm, err := kube.CoreV1().ConfigMaps(r.Namespace).Get(ctx, BundleConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rest := []byte(cm.Data[BundleKey])
	for len(rest) > 0 {
		var cert *x509.Certificate
		if cert, rest = nextCert(rest); cert == nil {
			break
		}
		s.bundle.AddCert(cert)
		s.cas++
	}
	for _, l := range r.Leaves {
		sec, err := kube.CoreV1().Secrets(r.Namespace).Get(ctx, l.Secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := parseCert(sec.Data["tls.crt"])
		if err != nil {
			t.Fatal(err)
		}
		s.leaves = append(s.leaves, cert)
	}
	return s
}

func verifyErr(t *testing.T, leaf *x509.Certificate, roots *x509.CertPool, at time.Time, what string) int {
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Logf("%s at %s: %s: %v", what, at.Format("15:04:05.000"), leaf.Subject.CommonName, err)
		return 1
	}
	return 0
}

// nextCert reads the first PEM certificate of b and returns it with the rest.
func nextCert(b []byte) (*x509.Certificate, []byte) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil
	}
	return cert, rest
}
