package api

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// ReloadingClients builds API clients with a token-bucket rate limit and rebuilds them when
// the limit changes; requests already running keep the client they started with.
type ReloadingClients struct {
	base   *rest.Config
	scheme *runtime.Scheme

	mu    sync.RWMutex
	qps   float32
	burst int
	kv    client.Client
	kube  kubernetes.Interface
}

// NewReloadingClients builds the first clients with qps and burst.
func NewReloadingClients(base *rest.Config, qps float32, burst int) (*ReloadingClients, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	r := &ReloadingClients{base: base, scheme: scheme}
	if err := r.SetRateLimit(qps, burst); err != nil {
		return nil, err
	}
	return r, nil
}

// SetRateLimit rebuilds the clients if the limit differs from the current one.
func (r *ReloadingClients) SetRateLimit(qps float32, burst int) error {
	r.mu.RLock()
	same := r.kv != nil && r.qps == qps && r.burst == burst
	r.mu.RUnlock()
	if same {
		return nil
	}
	cfg := rest.CopyConfig(r.base)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.RateLimiter = nil
	kv, err := client.New(cfg, client.Options{Scheme: r.scheme})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.qps, r.burst, r.kv, r.kube = qps, burst, kv, kube
	r.mu.Unlock()
	return nil
}

// RateLimit returns the limit in force.
func (r *ReloadingClients) RateLimit() (float32, int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.qps, r.burst
}

func (r *ReloadingClients) KubeVirt() client.Client {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.kv
}

func (r *ReloadingClients) Kube() kubernetes.Interface {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.kube
}
