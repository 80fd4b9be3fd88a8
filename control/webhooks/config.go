/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"slices"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// Feature gates the rules consult; the names are KubeVirt's.
const (
	FeatureGateHostDisk = "HostDisk"
	FeatureGateVSOCK    = "VSOCK"
)

// Config is the cluster configuration the rules depend on. The real
// implementation reads the KubeVirt CR.
type Config interface {
	FeatureGateEnabled(name string) bool
}

// StaticConfig is a fixed set of enabled feature gates.
type StaticConfig map[string]bool

// FeatureGateEnabled reports whether the gate is in the set.
func (c StaticConfig) FeatureGateEnabled(name string) bool { return c[name] }

// Privileges names the users and groups allowed to write what the system owns:
// object status and KubeVirt's reserved labels.
type Privileges struct {
	Users  []string
	Groups []string
}

// DefaultPrivileges are the service accounts of virt-api, virt-controller and
// virt-handler in namespace kubevirt, under KubeVirt's account names.
func DefaultPrivileges() Privileges {
	const prefix = "system:serviceaccount:kubevirt:"
	return Privileges{Users: []string{
		prefix + "kubevirt-apiserver",
		prefix + "kubevirt-controller",
		prefix + "kubevirt-handler",
	}}
}

// Allows reports whether the user is one of the privileged users or belongs to a
// privileged group.
func (p Privileges) Allows(u authenticationv1.UserInfo) bool {
	if slices.Contains(p.Users, u.Username) {
		return true
	}
	for _, g := range u.Groups {
		if slices.Contains(p.Groups, g) {
			return true
		}
	}
	return false
}

// Options configures the HTTP handlers.
type Options struct {
	// Privileged may change status and reserved labels; DefaultPrivileges when
	// both lists are empty.
	Privileged Privileges
	// Logger defaults to a no-op logger.
	Logger logr.Logger
	// MaxReviewBytes caps an AdmissionReview's size; DefaultMaxReviewBytes when zero. A larger
	// one is answered 413.
	MaxReviewBytes int64
	// Migrations looks up a new migration's VMI and the migrations in flight
	// (ValidateMigrationTarget); nil leaves those checks out.
	Migrations MigrationLookup
	// Evictions reads launcher pods and their VMIs for the eviction webhook and marks VMIs for
	// evacuation; nil lets every eviction through.
	Evictions EvictionLookup
	// LookupTimeout bounds those lookups (5 s when zero).
	LookupTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if len(o.Privileged.Users) == 0 && len(o.Privileged.Groups) == 0 {
		o.Privileged = DefaultPrivileges()
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.MaxReviewBytes <= 0 {
		o.MaxReviewBytes = DefaultMaxReviewBytes
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = 5 * time.Second
	}
	return o
}
