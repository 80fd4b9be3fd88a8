package config

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

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
	if ctl := From(kv, VirtController); ctl.QPS != 200 || ctl.Burst != 400 {
		t.Errorf("virt-controller takes its own limits, KubeVirt's 200/400 by default: %+v", ctl)
	}
	if h := From(nil, VirtHandler); h.QPS != 50 || h.Burst != 100 {
		t.Errorf("virt-handler's default is KubeVirt's 50/100: %+v", h)
	}
	if wh := From(nil, Webhooks); wh.QPS != 200 || wh.Burst != 400 {
		t.Errorf("the webhook client's default is KubeVirt's 200/400: %+v", wh)
	}
	if api.Equal(From(nil, VirtAPI)) || !api.Equal(From(kv, VirtAPI)) {
		t.Error("Equal")
	}
}

func TestMigrationSettings(t *testing.T) {
	def := From(nil, VirtHandler).Migrations
	if def != (Migrations{CompletionTimeoutPerGiB: 150, ProgressTimeout: 150}) {
		t.Errorf("defaults: %+v, want KubeVirt's (150 s per GiB, 150 s progress, unlimited bandwidth)", def)
	}
	bw := resource.MustParse("64Mi")
	kv := &v1.KubeVirt{Spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{MigrationConfiguration: &v1.MigrationConfiguration{
		BandwidthPerMigration: &bw, CompletionTimeoutPerGiB: ptr.To[int64](20), ProgressTimeout: ptr.To[int64](30),
		AllowAutoConverge: ptr.To(true), AllowPostCopy: ptr.To(true),
	}}}}
	got := From(kv, VirtHandler)
	want := Migrations{BandwidthPerMigration: 64 << 20, CompletionTimeoutPerGiB: 20, ProgressTimeout: 30, AllowAutoConverge: true, AllowPostCopy: true}
	if got.Migrations != want {
		t.Errorf("got %+v, want %+v", got.Migrations, want)
	}
	if got.Equal(From(nil, VirtHandler)) {
		t.Error("a migration setting change must count as a change")
	}
}
