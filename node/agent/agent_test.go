package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
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
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/node/deviceplugin"
)

// TestAgentFollowsTheKubeVirtCR runs a node agent against a real kube-apiserver and edits the
// KubeVirt CR: its client's rate limiter follows handlerConfiguration and the devices it offers
// follow the VSOCK gate, without a restart.
func TestAgentFollowsTheKubeVirtCR(t *testing.T) {
	c := controlplane.ForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crds := filepath.Join("..", "..", "deploy", "crds")
	c.MustKubectl(t, "apply", "--server-side", "-f", crds)
	c.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
	kube, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := pki.WriteFileAtomic(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Sign(pki.Request{CommonName: "node-1", Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := serving.Write(dir, "serving")
	if err != nil {
		t.Fatal(err)
	}

	actx, stop := context.WithCancel(ctx)
	a, err := Start(actx, Options{
		REST: c.RESTConfig(), NodeName: "node-1", Namespace: "kubevirt", KubeletPodsDir: t.TempDir(),
		APIListen: "127.0.0.1:0", AdvertiseHost: "127.0.0.1",
		TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: caFile,
		Log: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if err := <-a.Done(); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	rl, ok := a.Manager.GetConfig().RateLimiter.(*config.RateLimiter)
	if !ok {
		t.Fatalf("the agent's client has rate limiter %T, not one that follows the CR", a.Manager.GetConfig().RateLimiter)
	}
	want := func(qps float32, burst int, vsock bool) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			q, b := rl.Limits()
			offered := slices.Contains(offeredDevices(a.Config.Current()), deviceplugin.VhostVsock)
			if q == qps && b == burst && rl.QPS() == qps && offered == vsock {
				return
			}
			got = fmt.Sprintf("limits %v/%v, vhost-vsock offered %v", q, b, offered)
		}
		t.Fatalf("%s; want %v/%v, vhost-vsock offered %v", got, qps, burst, vsock)
	}
	want(50, 100, false) // KubeVirt's defaults for virt-handler

	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	limit := func(qps float32, burst int) *v1.ReloadableComponentConfiguration {
		return &v1.ReloadableComponentConfiguration{RestClient: &v1.RESTClientConfiguration{RateLimiter: &v1.RateLimiter{
			TokenBucketRateLimiter: &v1.TokenBucketRateLimiter{QPS: qps, Burst: burst}}}}
	}
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"}, Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
		HandlerConfiguration:    limit(7, 9),
		ControllerConfiguration: limit(1, 1), // another component's
		DeveloperConfiguration:  &v1.DeveloperConfiguration{FeatureGates: []string{featureGateVSOCK}},
	}}}
	if err := cl.Create(ctx, kv); err != nil {
		t.Fatal(err)
	}
	want(7, 9, true)

	kv.Spec.Configuration.HandlerConfiguration = limit(20.5, 30)
	kv.Spec.Configuration.DeveloperConfiguration.DisabledFeatureGates = []string{featureGateVSOCK}
	if err := cl.Update(ctx, kv); err != nil {
		t.Fatal(err)
	}
	want(20.5, 30, false)
}
