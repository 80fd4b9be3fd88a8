package config

import (
	"testing"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestRateLimiterIsReplacedOnlyWhenTheLimitChanges(t *testing.T) {
	rl := NewRateLimiter(0.001, 1)
	if !rl.TryAccept() || rl.TryAccept() {
		t.Fatal("a bucket of one token should take one request and refuse the next")
	}
	if rl.Set(0.001, 1) {
		t.Error("the same limit must keep its bucket")
	}
	if rl.TryAccept() {
		t.Error("keeping the bucket must not refill it")
	}
	if !rl.Set(100, 3) {
		t.Error("a new limit must replace the bucket")
	}
	if qps, burst := rl.Limits(); qps != 100 || burst != 3 || rl.QPS() != 100 {
		t.Errorf("limits = %v/%v, QPS() = %v; want 100/3", qps, burst, rl.QPS())
	}
	if !rl.TryAccept() {
		t.Error("the new bucket should take a request at once")
	}
}

func TestEachComponentReadsItsOwnSection(t *testing.T) {
	limit := func(qps float32, burst int) *v1.ReloadableComponentConfiguration {
		return &v1.ReloadableComponentConfiguration{RestClient: &v1.RESTClientConfiguration{RateLimiter: &v1.RateLimiter{
			TokenBucketRateLimiter: &v1.TokenBucketRateLimiter{QPS: qps, Burst: burst}}}}
	}
	kv := &v1.KubeVirt{Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
		APIConfiguration:        limit(1, 2),
		ControllerConfiguration: limit(3, 4),
		HandlerConfiguration:    limit(5, 6),
		WebhookConfiguration:    limit(7.5, 8),
	}}}
	for c, want := range map[Component][2]float64{VirtAPI: {1, 2}, VirtController: {3, 4}, VirtHandler: {5, 6}, Webhooks: {7.5, 8}} {
		if s := From(kv, c); float64(s.QPS) != want[0] || float64(s.Burst) != want[1] {
			t.Errorf("component %d: %v/%v, want %v/%v", c, s.QPS, s.Burst, want[0], want[1])
		}
	}
}
