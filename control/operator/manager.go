package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/operator/install"
)

// LeaseName is the operator's leader-election lease.
const LeaseName = "virt-operator"

// Options configure the operator.
type Options struct {
	Namespace string
	// Image is the operator's own image: its registry and tag are the components' defaults.
	Image       string
	Propagation time.Duration
	LeaderElect bool
	// Addresses of /metrics, the health probes and the webhook server (port).
	MetricsBindAddress, HealthProbeBindAddress string
	WebhookPort                                int
	Log                                        logr.Logger
}

// owned are the kinds of object the operator installs and heals; it caches only its own.
func owned() []client.Object {
	return []client.Object{
		&appsv1.Deployment{}, &appsv1.DaemonSet{}, &corev1.Service{}, &corev1.ServiceAccount{},
		&corev1.Secret{}, &corev1.ConfigMap{}, &policyv1.PodDisruptionBudget{},
		&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
		&apiregistrationv1.APIService{},
	}
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1.AddToScheme, apiregistrationv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewManager builds virt-operator: the leader reconciles; every replica serves the webhook.
func NewManager(cfg *rest.Config, o Options) (manager.Manager, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mine := labels.SelectorFromSet(labels.Set{install.ManagedByLabel: install.ManagedByValue})
	// Namespaced objects live in the operator's namespace, but for the RoleBinding that lets
	// virt-api read the front-proxy CA in kube-system; the operator's Role covers only its own.
	here := map[string]cache.Config{o.Namespace: {}}
	byObject := map[client.Object]cache.ByObject{}
	for _, obj := range owned() {
		bo := cache.ByObject{Label: mine}
		switch obj.(type) {
		case *rbacv1.Role, *rbacv1.RoleBinding:
			bo.Namespaces = map[string]cache.Config{o.Namespace: {}, "kube-system": {}}
		case *appsv1.Deployment, *appsv1.DaemonSet, *corev1.Service, *corev1.ServiceAccount,
			*corev1.Secret, *corev1.ConfigMap, *policyv1.PodDisruptionBudget:
			bo.Namespaces = here
		}
		byObject[obj] = bo
	}
	byObject[&v1.KubeVirt{}] = cache.ByObject{Namespaces: here}
	certs := &servingCertificate{kube: kube, namespace: o.Namespace}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                        scheme,
		Logger:                        o.Log,
		Cache:                         cache.Options{ByObject: byObject},
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true,
		WebhookServer: webhook.NewServer(webhook.Options{Port: o.WebhookPort,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = certs.GetCertificate }}}),
	})
	if err != nil {
		return nil, err
	}
	registry, tag := install.RegistryAndTag(o.Image)
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Kube: kube, Aggregator: agg,
		Applier:   &install.Applier{Dynamic: dyn, Mapper: mgr.GetRESTMapper()},
		Namespace: o.Namespace, Registry: registry, Tag: tag, Propagation: o.Propagation, Log: o.Log}
	if tag == "" {
		return nil, fmt.Errorf("operator image %q has no tag: the components' version comes from it", o.Image)
	}
	mgr.GetWebhookServer().Register(DeleteValidatePath, &admission.Webhook{Handler: &deletionAdmitter{r: r}})

	toCR := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1.KubeVirtList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(o.Namespace)); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, kv := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&kv)})
		}
		return reqs
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("virt-operator").For(&v1.KubeVirt{})
	for _, obj := range owned() {
		b = b.Watches(obj, toCR)
	}
	if err := b.Complete(r); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
