// Package operator is virt-operator: from the KubeVirt CR it installs qvirt's components,
// keeps them as declared (server-side apply on every change of what it owns), keeps their
// certificates fresh, reports the installation's status, and uninstalls on deletion.
package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/operator/certs"
	"github.com/qvirt/qvirt/control/operator/install"
)

// Finalizer holds a KubeVirt CR until its installation is removed (KubeVirt's name).
const Finalizer = "kubevirt.io/foregroundDeleteKubeVirt"

// resyncEvery bounds how stale a copy the operator keeps (the front-proxy CA) can get.
const resyncEvery = time.Minute

// Reconciler installs and heals the installation of the KubeVirt CRs of one namespace.
type Reconciler struct {
	Client client.Client
	// Reader reads uncached (workloads, which the operator does not watch).
	Reader     client.Reader
	Kube       kubernetes.Interface
	Aggregator aggregator.Interface
	Applier    *install.Applier
	Namespace  string
	// Registry and Tag are the components' images unless the CR names others: the operator's
	// own.
	Registry, Tag string
	// Propagation bounds how long a Secret's or ConfigMap's change takes to reach the
	// components' files.
	Propagation time.Duration
	Log         logr.Logger
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kv := &v1.KubeVirt{}
	if err := r.Client.Get(ctx, req.NamespacedName, kv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := r.Log.WithValues("kubevirt", req.NamespacedName)
	ctx = logr.NewContext(ctx, log)
	if first, err := r.first(ctx); err != nil {
		return ctrl.Result{}, err
	} else if first != kv.Name {
		return ctrl.Result{}, r.setStatus(ctx, kv, refused(kv, "ExistingDeployment",
			fmt.Sprintf("KubeVirt %s/%s is the installation of this namespace; this one is ignored", kv.Namespace, first)))
	}
	if kv.DeletionTimestamp != nil {
		return r.uninstall(ctx, kv)
	}
	if controllerutil.AddFinalizer(kv, Finalizer) {
		if err := r.Client.Update(ctx, kv); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.install(ctx, kv)
}

// first is the oldest KubeVirt CR of the namespace: the one installation it has; any other is
// refused, as KubeVirt refuses a second.
func (r *Reconciler) first(ctx context.Context) (string, error) {
	var list v1.KubeVirtList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Namespace)); err != nil {
		return "", err
	}
	if len(list.Items) == 0 {
		return "", nil
	}
	oldest := slices.MinFunc(list.Items, func(a, b v1.KubeVirt) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return oldest.Name, nil
}

// install applies everything the CR asks for, removes what an earlier version installed and
// this one does not, and reports how far the components are.
func (r *Reconciler) install(ctx context.Context, kv *v1.KubeVirt) (ctrl.Result, error) {
	set, errs := SettingsOf(kv, r.Namespace, r.Registry, r.Tag)
	cfg := set.Certs
	if len(errs) == 0 {
		errs = r.checkPropagation(cfg)
	}
	if len(errs) > 0 {
		return ctrl.Result{}, r.setStatus(ctx, kv, refused(kv, "InvalidConfiguration", errs.ToAggregate().Error()))
	}
	objs, next, err := r.apply(ctx, kv, cfg)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Installing")
		if serr := r.setStatus(ctx, kv, failed(kv, r.target(kv), err)); serr != nil {
			return ctrl.Result{}, serr
		}
		return ctrl.Result{}, err
	}
	if _, err := r.prune(ctx, objs); err != nil {
		return ctrl.Result{}, err
	}
	ready, why, err := r.ready(ctx, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.setStatus(ctx, kv, deployed(kv, r.target(kv), r.Tag, ready, why)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: until(next)}, nil
}

// checkPropagation refuses lifetimes that leave components no time to load what is renewed: a
// new CA signs only once every component can have its bundle, and the old one leaves only once
// every server shows a certificate of the new one (two propagations); a renewed certificate
// must be loaded before the old one expires (one).
func (r *Reconciler) checkPropagation(cfg certs.Config) field.ErrorList {
	p := field.NewPath("spec", "certificateRotateStrategy", "selfSigned")
	var errs field.ErrorList
	if cfg.CARenewBefore < 2*r.Propagation {
		errs = append(errs, field.Invalid(p.Child("ca", "renewBefore"), cfg.CARenewBefore.String(),
			fmt.Sprintf("must be at least twice the time a change takes to reach the components (%s)", r.Propagation)))
	}
	if cfg.ServerRenewBefore < r.Propagation {
		errs = append(errs, field.Invalid(p.Child("server", "renewBefore"), cfg.ServerRenewBefore.String(),
			fmt.Sprintf("must be at least the time a change takes to reach the components (%s)", r.Propagation)))
	}
	return errs
}

// apply makes the certificates due and applies every component object; it returns them and
// when the certificates need a look next.
func (r *Reconciler) apply(ctx context.Context, kv *v1.KubeVirt, cfg certs.Config) ([]*unstructured.Unstructured, time.Time, error) {
	bundle, next, err := r.syncCertificates(ctx, cfg)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("certificates: %w", err)
	}
	objs, err := r.render(kv, bundle)
	if err != nil {
		return nil, time.Time{}, err
	}
	frontProxy, err := r.frontProxyCA(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	objs = append([]*unstructured.Unstructured{frontProxy}, objs...)
	if err := r.Applier.Apply(ctx, objs); err != nil {
		return nil, time.Time{}, err
	}
	return objs, next, nil
}

func (r *Reconciler) render(kv *v1.KubeVirt, bundle []byte) ([]*unstructured.Unstructured, error) {
	set, _ := SettingsOf(kv, r.Namespace, r.Registry, r.Tag)
	set.Install.Bundle = bundle
	return install.Render(set.Install)
}

// target is the version the CR asks for: its imageTag, else the operator's.
func (r *Reconciler) target(kv *v1.KubeVirt) string {
	set, _ := SettingsOf(kv, r.Namespace, r.Registry, r.Tag)
	return set.Install.Tag
}

// frontProxyCA is the copy of the aggregation layer's client CA that virt-api mounts (a pod
// cannot mount another namespace's ConfigMap).
func (r *Reconciler) frontProxyCA(ctx context.Context) (*unstructured.Unstructured, error) {
	src, err := r.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the front-proxy CA: %w", err)
	}
	ca := src.Data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, fmt.Errorf("kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: the API server does not serve aggregated APIs")
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(r.Namespace)
	u.SetName("virt-api-requestheader-ca")
	u.SetLabels(map[string]string{install.ManagedByLabel: install.ManagedByValue, v1.AppLabel: "virt-api"})
	if err := unstructured.SetNestedStringMap(u.Object, map[string]string{"ca.crt": ca}, "data"); err != nil {
		return nil, err
	}
	return u, nil
}

func until(next time.Time) time.Duration {
	d := time.Until(next)
	switch {
	case next.IsZero() || d > resyncEvery:
		return resyncEvery
	case d < time.Second:
		return time.Second
	}
	return d
}
