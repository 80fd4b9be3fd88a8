// Package config follows the KubeVirt CR's spec.configuration: feature gates, emulation and
// the client rate limits of each component. Components read the current snapshot and are told
// when it changes, so none needs a restart to pick up new settings.
package config

import (
	"slices"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Component selects whose rate limits apply.
type Component int

const (
	VirtAPI Component = iota
	VirtController
	VirtHandler
	Webhooks
)

// Defaults for a component's client toward the kube-apiserver.
const (
	DefaultQPS   float32 = 30
	DefaultBurst int     = 50
)

// Snapshot is the configuration at one point in time.
type Snapshot struct {
	FeatureGates map[string]bool
	UseEmulation bool
	QPS          float32
	Burst        int
}

// FeatureGateEnabled reports whether a gate is on.
func (s Snapshot) FeatureGateEnabled(name string) bool { return s.FeatureGates[name] }

// From derives the snapshot for component c from a KubeVirt CR (nil: defaults). A gate listed
// in disabledFeatureGates is off even when also enabled.
func From(kv *v1.KubeVirt, c Component) Snapshot {
	s := Snapshot{FeatureGates: map[string]bool{}, QPS: DefaultQPS, Burst: DefaultBurst}
	if kv == nil {
		return s
	}
	cfg := kv.Spec.Configuration
	if dc := cfg.DeveloperConfiguration; dc != nil {
		for _, g := range dc.FeatureGates {
			if !slices.Contains(dc.DisabledFeatureGates, g) {
				s.FeatureGates[g] = true
			}
		}
		s.UseEmulation = dc.UseEmulation
	}
	var rc *v1.ReloadableComponentConfiguration
	switch c {
	case VirtAPI:
		rc = cfg.APIConfiguration
	case VirtController:
		rc = cfg.ControllerConfiguration
	case VirtHandler:
		rc = cfg.HandlerConfiguration
	case Webhooks:
		rc = cfg.WebhookConfiguration
	}
	if rc != nil && rc.RestClient != nil && rc.RestClient.RateLimiter != nil && rc.RestClient.RateLimiter.TokenBucketRateLimiter != nil {
		tb := rc.RestClient.RateLimiter.TokenBucketRateLimiter
		if tb.QPS > 0 {
			s.QPS = tb.QPS
		}
		if tb.Burst > 0 {
			s.Burst = tb.Burst
		}
	}
	return s
}

// Equal reports whether two snapshots configure the same thing.
func (s Snapshot) Equal(o Snapshot) bool {
	if s.UseEmulation != o.UseEmulation || s.QPS != o.QPS || s.Burst != o.Burst || len(s.FeatureGates) != len(o.FeatureGates) {
		return false
	}
	for g := range s.FeatureGates {
		if !o.FeatureGates[g] {
			return false
		}
	}
	return true
}
