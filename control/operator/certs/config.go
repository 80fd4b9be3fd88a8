// Package certs decides when the certificates of an installation are made, renewed and retired:
// a self-signed CA and the serving and client certificates it signs, with the lifetimes of the
// KubeVirt CR's spec.certificateRotateStrategy.selfSigned. It holds no keys and talks to no API:
// the operator stores what it decides in Secrets and the CA bundle.
package certs

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// KubeVirt's defaults: the CA lives 7 days and servers 24 h, each renewed when a fifth of its
// lifetime is left.
const (
	DefaultCADuration     = 168 * time.Hour
	DefaultServerDuration = 24 * time.Hour
	defaultRenewShare     = 0.2
)

// Config is the lifetimes in force, defaults filled in.
type Config struct {
	CADuration, CARenewBefore         time.Duration
	ServerDuration, ServerRenewBefore time.Duration
}

// ConfigFrom reads spec.certificateRotateStrategy, the deprecated interval fields included (the
// newer ones win). Errors name the CR's field.
func ConfigFrom(s v1.KubeVirtCertificateRotateStrategy) (Config, field.ErrorList) {
	p := field.NewPath("spec", "certificateRotateStrategy", "selfSigned")
	c := Config{CADuration: DefaultCADuration, ServerDuration: DefaultServerDuration}
	var caRenew, serverRenew *metav1.Duration
	if ss := s.SelfSigned; ss != nil {
		set(&c.CADuration, ss.CARotateInterval)
		set(&c.ServerDuration, ss.CertRotateInterval)
		caRenew = ss.CAOverlapInterval
		if ss.CA != nil {
			set(&c.CADuration, ss.CA.Duration)
			if ss.CA.RenewBefore != nil {
				caRenew = ss.CA.RenewBefore
			}
		}
		if ss.Server != nil {
			set(&c.ServerDuration, ss.Server.Duration)
			serverRenew = ss.Server.RenewBefore
		}
	}
	c.CARenewBefore = share(c.CADuration, caRenew)
	c.ServerRenewBefore = share(c.ServerDuration, serverRenew)

	var errs field.ErrorList
	check := func(d, renew time.Duration, fp *field.Path) {
		switch {
		case d <= 0:
			errs = append(errs, field.Invalid(fp.Child("duration"), d.String(), "must be positive"))
		case renew <= 0 || renew >= d:
			errs = append(errs, field.Invalid(fp.Child("renewBefore"), renew.String(), "must be positive and shorter than the duration "+d.String()))
		}
	}
	check(c.CADuration, c.CARenewBefore, p.Child("ca"))
	check(c.ServerDuration, c.ServerRenewBefore, p.Child("server"))
	if len(errs) == 0 && c.ServerDuration > c.CADuration-c.CARenewBefore {
		errs = append(errs, field.Invalid(p.Child("server", "duration"), c.ServerDuration.String(),
			"must not be longer than the CA's duration less its renewBefore ("+(c.CADuration-c.CARenewBefore).String()+"): a server certificate would outlive the CA that signed it"))
	}
	return c, errs
}

func set(d *time.Duration, from *metav1.Duration) {
	if from != nil {
		*d = from.Duration
	}
}

// share is renewBefore when set, else the default share of the duration.
func share(d time.Duration, renew *metav1.Duration) time.Duration {
	if renew != nil {
		return renew.Duration
	}
	return time.Duration(float64(d) * defaultRenewShare)
}
