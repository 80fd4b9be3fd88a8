package config

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Watcher keeps the snapshot of one component current from the KubeVirt CRs of a namespace.
type Watcher struct {
	component Component
	log       logr.Logger
	cache     cache.Cache

	mu        sync.RWMutex
	current   Snapshot
	listeners []func(Snapshot)
}

// NewWatcher watches KubeVirt CRs in namespace. Until Start has synced, the defaults apply.
func NewWatcher(cfg *rest.Config, namespace string, c Component, log logr.Logger) (*Watcher, error) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return nil, err
	}
	return &Watcher{component: c, log: log, cache: ca, current: From(nil, c)}, nil
}

// Current returns the snapshot in force.
func (w *Watcher) Current() Snapshot {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.current
}

// FeatureGateEnabled reports whether a gate is on now.
func (w *Watcher) FeatureGateEnabled(name string) bool { return w.Current().FeatureGateEnabled(name) }

// ClusterEvictionStrategy is the KubeVirt CR's evictionStrategy ("": None).
func (w *Watcher) ClusterEvictionStrategy() v1.EvictionStrategy { return w.Current().EvictionStrategy }

// OnChange registers fn to run (synchronously, in order) whenever the snapshot changes.
func (w *Watcher) OnChange(fn func(Snapshot)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listeners = append(w.listeners, fn)
}

// Start watches until ctx ends; it returns once the first list has been applied.
func (w *Watcher) Start(ctx context.Context) error {
	inf, err := w.cache.GetInformer(ctx, &v1.KubeVirt{})
	if err != nil {
		return err
	}
	refresh := func(any) { w.refresh(ctx) }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    refresh,
		UpdateFunc: func(_, n any) { refresh(n) },
		DeleteFunc: refresh,
	}); err != nil {
		return err
	}
	go func() {
		if err := w.cache.Start(ctx); err != nil {
			w.log.Error(err, "KubeVirt configuration watch stopped")
		}
	}()
	w.cache.WaitForCacheSync(ctx)
	w.refresh(ctx)
	return nil
}

// refresh recomputes the snapshot from the cache: the oldest KubeVirt CR wins, as only one
// installation per cluster is valid.
func (w *Watcher) refresh(ctx context.Context) {
	var list v1.KubeVirtList
	if err := w.cache.List(ctx, &list); err != nil {
		w.log.Error(err, "listing KubeVirt CRs")
		return
	}
	next := From(Oldest(list.Items), w.component)
	w.mu.Lock()
	if next.Equal(w.current) {
		w.mu.Unlock()
		return
	}
	w.current = next
	listeners := append([]func(Snapshot){}, w.listeners...)
	w.mu.Unlock()
	w.log.Info("configuration changed", "qps", next.QPS, "burst", next.Burst, "useEmulation", next.UseEmulation, "featureGates", len(next.FeatureGates), "migrations", next.Migrations)
	for _, fn := range listeners {
		fn(next)
	}
}

// Read derives component c's snapshot from the KubeVirt CRs r sees (a controller's cache, which
// keeps them current without a watcher of its own).
func Read(ctx context.Context, r client.Reader, c Component) (Snapshot, error) {
	var list v1.KubeVirtList
	if err := r.List(ctx, &list); err != nil {
		return Snapshot{}, fmt.Errorf("listing KubeVirt CRs: %w", err)
	}
	return From(Oldest(list.Items), c), nil
}
