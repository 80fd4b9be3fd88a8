package config

import (
	"testing"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestFromKubeVirtCR(t *testing.T) {
	if s := From(nil, VirtAPI); s.QPS != 30 || s.Burst != 50 || s.UseEmulation || len(s.FeatureGates) != 0 {
		t.Errorf("defaults: %+v", s)
	}
	kv := &v1.KubeVirt{Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{
		DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{"HostDisk", "Snapshot"}, DisabledFeatureGates: []string{"Snapshot"}, UseEmulation: true},
		APIConfiguration: &v1.ReloadableComponentConfiguration{RestClient: &v1.RESTClientConfiguration{RateLimiter: &v1.RateLimiter{
			TokenBucketRateLimiter: &v1.TokenBucketRateLimiter{QPS: 5, Burst: 7}}}},
	}}}
	api := From(kv, VirtAPI)
	if api.QPS != 5 || api.Burst != 7 || !api.UseEmulation {
		t.Errorf("virt-api: %+v", api)
	}
	if !api.FeatureGateEnabled("HostDisk") || api.FeatureGateEnabled("Snapshot") {
		t.Errorf("gates: %v (a disabled gate must win)", api.FeatureGates)
	}
	if ctl := From(kv, VirtController); ctl.QPS != 30 || ctl.Burst != 50 {
		t.Errorf("virt-controller takes its own limits: %+v", ctl)
	}
	if api.Equal(From(nil, VirtAPI)) || !api.Equal(From(kv, VirtAPI)) {
		t.Error("Equal")
	}
}
