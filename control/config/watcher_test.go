package config_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// TestWatcherFollowsTheKubeVirtCR changes the CR on a real kube-apiserver and sees the new rate
// limits and gates reach the listeners without a restart.
func TestWatcherFollowsTheKubeVirtCR(t *testing.T) {
	c := controlplane.ForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crds := filepath.Join(testenv.RepoRoot(t), "deploy", "crds")
	c.MustKubectl(t, "apply", "--server-side", "-f", crds)
	c.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	kube, _ := kubernetes.NewForConfig(c.RESTConfig())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := config.NewWatcher(c.RESTConfig(), "kubevirt", config.VirtAPI, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan config.Snapshot, 10)
	w.OnChange(func(s config.Snapshot) { changes <- s })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s := w.Current(); s.QPS != config.DefaultQPS || s.Burst != config.DefaultBurst {
		t.Fatalf("without a CR: %+v", s)
	}
	// virt-api's SubjectAccessReview client follows webhookConfiguration through its own watcher.
	ww, err := config.NewWatcher(c.RESTConfig(), "kubevirt", config.Webhooks, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := ww.Start(ctx); err != nil {
		t.Fatal(err)
	}
	webhookLimiter := ww.RateLimiter()
	if qps, burst := webhookLimiter.Limits(); qps != 200 || burst != 400 {
		t.Fatalf("webhook client without a CR: %v/%v, want KubeVirt's 200/400", qps, burst)
	}

	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	cl, _ := client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"}, Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
		DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{"HostDisk"}},
		APIConfiguration: &v1.ReloadableComponentConfiguration{RestClient: &v1.RESTClientConfiguration{RateLimiter: &v1.RateLimiter{
			TokenBucketRateLimiter: &v1.TokenBucketRateLimiter{QPS: 7, Burst: 9}}}},
		WebhookConfiguration: &v1.ReloadableComponentConfiguration{RestClient: &v1.RESTClientConfiguration{RateLimiter: &v1.RateLimiter{
			TokenBucketRateLimiter: &v1.TokenBucketRateLimiter{QPS: 3, Burst: 4}}}},
	}}}
	if err := cl.Create(ctx, kv); err != nil {
		t.Fatal(err)
	}
	s := next(t, changes)
	if s.QPS != 7 || s.Burst != 9 || !s.FeatureGateEnabled("HostDisk") {
		t.Fatalf("after create: %+v", s)
	}
	kv.Spec.Configuration.APIConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.QPS = 11
	if err := cl.Update(ctx, kv); err != nil {
		t.Fatal(err)
	}
	if s := next(t, changes); s.QPS != 11 || !w.FeatureGateEnabled("HostDisk") {
		t.Fatalf("after update: %+v", s)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		qps, burst := webhookLimiter.Limits()
		if qps == 3 && burst == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook client after the CR: %v/%v, want 3/4", qps, burst)
		}
	}
}

func next(t *testing.T, ch <-chan config.Snapshot) config.Snapshot {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no configuration change seen")
	}
	return config.Snapshot{}
}
