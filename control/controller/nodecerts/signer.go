package nodecerts

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// DefaultLifetime is the longest certificate issued; shorter requests are honoured.
const DefaultLifetime = 24 * time.Hour

// Reconciler approves or denies node API certificate requests and signs the approved ones.
type Reconciler struct {
	Client client.Client
	// CA returns the signing CA (certificate and key); it is read per request so a rotated CA
	// on disk applies without a restart.
	CA func() (*tls.Certificate, error)
	// HandlerUser is the node agent's service account user name.
	HandlerUser string
	// MaxLifetime caps the certificates' lifetime (DefaultLifetime).
	MaxLifetime time.Duration
}

// HandlerUser is the user name of the node agent's service account in namespace.
func HandlerUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":kubevirt-handler"
}

// SetupWithManager watches the requests addressed to nodeapi.SignerName.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		csr, ok := o.(*certificatesv1.CertificateSigningRequest)
		return ok && csr.Spec.SignerName == nodeapi.SignerName
	})
	return ctrl.NewControllerManagedBy(mgr).Named("nodecerts").
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(ours)).
		Complete(r)
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("csr", req.Name)
	var csr certificatesv1.CertificateSigningRequest
	if err := r.Client.Get(ctx, req.NamespacedName, &csr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if csr.Spec.SignerName != nodeapi.SignerName || len(csr.Status.Certificate) > 0 ||
		hasCondition(&csr, certificatesv1.CertificateDenied) || hasCondition(&csr, certificatesv1.CertificateFailed) {
		return ctrl.Result{}, nil
	}
	if !hasCondition(&csr, certificatesv1.CertificateApproved) {
		node, err := Review(&csr, r.HandlerUser)
		if err == nil {
			err = r.nodeExists(ctx, node)
		}
		if err != nil {
			log.Info("denying node API certificate request", "user", csr.Spec.Username, "reason", err.Error())
			return ctrl.Result{}, r.setCondition(ctx, &csr, certificatesv1.CertificateDenied, "NodeIdentityMismatch", err.Error())
		}
		log.Info("approving node API certificate request", "node", node)
		if err := r.setCondition(ctx, &csr, certificatesv1.CertificateApproved, "NodeAgentOnNode", "requested by the node agent running on node "+node); err != nil {
			return ctrl.Result{}, err
		}
	}
	cert, err := r.sign(&csr)
	if err != nil {
		log.Error(err, "signing node API certificate")
		return ctrl.Result{}, r.setStatusCondition(ctx, &csr, certificatesv1.CertificateFailed, "SigningFailed", err.Error())
	}
	csr.Status.Certificate = cert
	return ctrl.Result{}, r.Client.Status().Update(ctx, &csr)
}

func (r *Reconciler) nodeExists(ctx context.Context, node string) error {
	var n corev1.Node
	err := r.Client.Get(ctx, types.NamespacedName{Name: node}, &n)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s does not exist", node)
	}
	return err
}

// setCondition records an approval decision (the approval subresource).
func (r *Reconciler) setCondition(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType, reason, msg string) error {
	addCondition(csr, t, reason, msg)
	return r.Client.SubResource("approval").Update(ctx, csr)
}

// setStatusCondition records a signer's outcome (the status subresource).
func (r *Reconciler) setStatusCondition(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType, reason, msg string) error {
	addCondition(csr, t, reason, msg)
	return r.Client.Status().Update(ctx, csr)
}

func addCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType, reason, msg string) {
	now := metav1.Now()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now,
	})
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// sign issues the certificate the (approved, reviewed) request asks for, for at most
// MaxLifetime and never beyond the CA's own expiry.
func (r *Reconciler) sign(csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	req, err := ParseRequest(csr.Spec.Request)
	if err != nil {
		return nil, err
	}
	ca, err := r.CA()
	if err != nil {
		return nil, fmt.Errorf("node API CA: %w", err)
	}
	if ca.Leaf == nil {
		if ca.Leaf, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
			return nil, err
		}
	}
	lifetime := r.MaxLifetime
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	if s := csr.Spec.ExpirationSeconds; s != nil && time.Duration(*s)*time.Second < lifetime {
		lifetime = time.Duration(*s) * time.Second
	}
	now := time.Now()
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Leaf.NotAfter) {
		notAfter = ca.Leaf.NotAfter
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	usage := x509.KeyUsageDigitalSignature
	if _, ok := req.PublicKey.(*rsa.PublicKey); ok {
		usage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      req.Subject,
		DNSNames:     req.DNSNames,
		NotBefore:    now.Add(-5 * time.Minute), // clock skew between nodes
		NotAfter:     notAfter,
		KeyUsage:     usage,
		ExtKeyUsage:  extKeyUsages(csr.Spec.Usages),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, req.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// extKeyUsages are the certificate's extended usages: serving always (Review requires it), and
// client auth when asked for, so that a node agent can present its node's identity to another
// node's agent (the migration proxy).
func extKeyUsages(asked []certificatesv1.KeyUsage) []x509.ExtKeyUsage {
	ext := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if slices.Contains(asked, certificatesv1.UsageClientAuth) {
		ext = append(ext, x509.ExtKeyUsageClientAuth)
	}
	return ext
}
