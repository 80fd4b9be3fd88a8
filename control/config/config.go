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
	// Webhooks is virt-api's SubjectAccessReview client, which KubeVirt's webhookConfiguration
	// limits.
	Webhooks
)

// Defaults of virt-api's client toward the kube-apiserver.
const (
	DefaultQPS   float32 = 30
	DefaultBurst int     = 50
)

// DefaultRateLimit is component c's client rate limit when the CR sets none: virt-api's
// DefaultQPS and DefaultBurst, KubeVirt's for the others.
func DefaultRateLimit(c Component) (qps float32, burst int) {
	switch c {
	case VirtController, Webhooks:
		return 200, 400
	case VirtHandler:
		return 50, 100
	}
	return DefaultQPS, DefaultBurst
}

// Oldest is the KubeVirt CR in force among several (nil for none): only one installation per
// cluster is valid, and the first one made is it.
func Oldest(items []v1.KubeVirt) *v1.KubeVirt {
	var kv *v1.KubeVirt
	for i := range items {
		if kv == nil || items[i].CreationTimestamp.Before(&kv.CreationTimestamp) {
			kv = &items[i]
		}
	}
	return kv
}

// Snapshot is the configuration at one point in time.
type Snapshot struct {
	FeatureGates map[string]bool
	UseEmulation bool
	QPS          float32
	Burst        int
	Migrations   Migrations
	// EvictionStrategy is the cluster's default for VMIs that set none; "" is None.
	EvictionStrategy v1.EvictionStrategy
}

// Migrations are the KubeVirt CR's spec.configuration.migrations, with KubeVirt's defaults.
type Migrations struct {
	// BandwidthPerMigration in bytes per second; 0: unlimited.
	BandwidthPerMigration uint64
	// CompletionTimeoutPerGiB in seconds: a migration may last this long per GiB of guest
	// memory (and local disks) before it is aborted, or switched to post-copy when allowed.
	CompletionTimeoutPerGiB int64
	// ProgressTimeout in seconds without progress before a migration is aborted.
	ProgressTimeout   int64
	AllowAutoConverge bool
	AllowPostCopy     bool
}

// KubeVirt's migration defaults.
const (
	DefaultCompletionTimeoutPerGiB int64 = 150
	DefaultProgressTimeout         int64 = 150
)

func migrationsFrom(m *v1.MigrationConfiguration) Migrations {
	out := Migrations{CompletionTimeoutPerGiB: DefaultCompletionTimeoutPerGiB, ProgressTimeout: DefaultProgressTimeout}
	if m == nil {
		return out
	}
	if q := m.BandwidthPerMigration; q != nil && q.Sign() > 0 {
		out.BandwidthPerMigration = uint64(q.Value())
	}
	if v := m.CompletionTimeoutPerGiB; v != nil && *v > 0 {
		out.CompletionTimeoutPerGiB = *v
	}
	if v := m.ProgressTimeout; v != nil && *v > 0 {
		out.ProgressTimeout = *v
	}
	out.AllowAutoConverge = m.AllowAutoConverge != nil && *m.AllowAutoConverge
	out.AllowPostCopy = m.AllowPostCopy != nil && *m.AllowPostCopy
	return out
}

// FeatureGateEnabled reports whether a gate is on.
func (s Snapshot) FeatureGateEnabled(name string) bool { return s.FeatureGates[name] }

// From derives the snapshot for component c from a KubeVirt CR (nil: defaults). A gate listed
// in disabledFeatureGates is off even when also enabled.
func From(kv *v1.KubeVirt, c Component) Snapshot {
	s := Snapshot{FeatureGates: map[string]bool{}, Migrations: migrationsFrom(nil)}
	s.QPS, s.Burst = DefaultRateLimit(c)
	if kv == nil {
		return s
	}
	cfg := kv.Spec.Configuration
	s.Migrations = migrationsFrom(cfg.MigrationConfiguration)
	if e := cfg.EvictionStrategy; e != nil && *e != v1.EvictionStrategyNone {
		s.EvictionStrategy = *e
	}
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
		// The CRD refuses values below these; a CR stored before it did keeps the default.
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
	if s.UseEmulation != o.UseEmulation || s.QPS != o.QPS || s.Burst != o.Burst || s.Migrations != o.Migrations || s.EvictionStrategy != o.EvictionStrategy || len(s.FeatureGates) != len(o.FeatureGates) {
		return false
	}
	for g := range s.FeatureGates {
		if !o.FeatureGates[g] {
			return false
		}
	}
	return true
}
