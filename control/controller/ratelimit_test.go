package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

func tokenBucket(qps float32, burst int) *virtv1.ReloadableComponentConfiguration {
	return &virtv1.ReloadableComponentConfiguration{RestClient: &virtv1.RESTClientConfiguration{RateLimiter: &virtv1.RateLimiter{
		TokenBucketRateLimiter: &virtv1.TokenBucketRateLimiter{QPS: qps, Burst: burst}}}}
}

// TestConfigurationFollowsTheKubeVirtCR edits the KubeVirt CR while virt-controller runs: the
// limiter of its client follows controllerConfiguration, and a launcher pod made afterwards
// has the new useEmulation, all without a restart.
func TestConfigurationFollowsTheKubeVirtCR(t *testing.T) {
	e := startEnv(t, "node-1")
	m := e.startManager()
	ctx := context.Background()
	rl, ok := m.mgr.GetConfig().RateLimiter.(*config.RateLimiter)
	if !ok {
		t.Fatalf("the manager's client has rate limiter %T, not one that follows the CR", m.mgr.GetConfig().RateLimiter)
	}
	limits := func(qps float32, burst int) {
		t.Helper()
		e.eventually(30*time.Second, func() (bool, string) {
			q, b := rl.Limits()
			return q == qps && b == burst && rl.QPS() == qps, fmt.Sprintf("limits %v/%v, want %v/%v", q, b, qps, burst)
		})
	}
	limits(200, 400) // KubeVirt's default for virt-controller

	kv := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"}, Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{
		ControllerConfiguration: tokenBucket(12.5, 25),
		APIConfiguration:        tokenBucket(1, 1), // another component's: not virt-controller's
		DeveloperConfiguration:  &virtv1.DeveloperConfiguration{UseEmulation: true},
	}}}
	e.create(kv)
	limits(12.5, 25)

	e.namespace(ctx, "emulation")
	e.create(newVM("emulation", "vm", virtv1.RunStrategyAlways))
	e.eventually(time.Minute, func() (bool, string) {
		pods := e.pods("emulation")
		if len(pods) != 1 {
			return false, fmt.Sprintf("%d launcher pods", len(pods))
		}
		for _, c := range pods[0].Spec.Containers {
			if _, kvm := c.Resources.Limits[launcherpod.KVMDevice]; kvm {
				t.Fatalf("container %s asks for /dev/kvm under useEmulation", c.Name)
			}
		}
		return true, ""
	})

	e.retry(func() error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(kv), kv); err != nil {
			return err
		}
		kv.Spec.Configuration.ControllerConfiguration = tokenBucket(40, 80)
		return e.c.Update(ctx, kv)
	})
	limits(40, 80)

	if err := e.c.Delete(ctx, kv); err != nil {
		t.Fatal(err)
	}
	limits(200, 400)
}
