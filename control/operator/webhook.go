package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// The operator's own webhook (KubeVirt's names): it refuses deleting a KubeVirt CR whose
// uninstall strategy blocks while workloads exist, so that the deletion fails at once with the
// reason instead of hanging on the finalizer.
const (
	OperatorService    = "kubevirt-operator-webhook"
	DeleteValidatePath = "/kubevirt-validate-delete"
)

// deletionAdmitter answers DELETE reviews of KubeVirt CRs.
type deletionAdmitter struct {
	r *Reconciler
}

func (a *deletionAdmitter) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	kv := &v1.KubeVirt{}
	if err := a.r.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, kv); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !blocks(kv) || kv.Status.Phase != v1.KubeVirtPhaseDeployed {
		return admission.Allowed("")
	}
	what, err := a.r.workloads(ctx)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if what != "" {
		return admission.Denied(fmt.Sprintf(uninstallMessage, what))
	}
	return admission.Allowed("")
}

// servingCertificate serves the Secret the operator issues for its webhook, read again at most
// every few seconds so that a renewed certificate is served without a restart.
type servingCertificate struct {
	kube      kubernetes.Interface
	namespace string

	mu      sync.Mutex
	cert    *tls.Certificate
	fetched time.Time
}

func (s *servingCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert != nil && time.Since(s.fetched) < 5*time.Second {
		return s.cert, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sec, err := s.kube.CoreV1().Secrets(s.namespace).Get(ctx, OperatorSecret, metav1.GetOptions{})
	if err != nil {
		if s.cert != nil {
			return s.cert, nil
		}
		return nil, fmt.Errorf("no serving certificate yet: %w", err)
	}
	c, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", s.namespace, OperatorSecret, err)
	}
	s.cert, s.fetched = &c, time.Now()
	return s.cert, nil
}
