package certs

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

var noStrategy = v1.KubeVirtCertificateRotateStrategy{}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestConfigDefaultsAreKubeVirts(t *testing.T) {
	c, errs := ConfigFrom(noStrategy)
	want := Config{CADuration: 168 * time.Hour, CARenewBefore: 168 * time.Hour / 5, ServerDuration: 24 * time.Hour, ServerRenewBefore: 24 * time.Hour / 5}
	if len(errs) > 0 || c != want {
		t.Errorf("defaults %+v %v, want %+v", c, errs, want)
	}
}

func TestConfigReadsNewAndDeprecatedFields(t *testing.T) {
	s := v1.KubeVirtCertificateRotateStrategy{SelfSigned: &v1.KubeVirtSelfSignConfiguration{
		CARotateInterval: dur(48 * time.Hour), CAOverlapInterval: dur(12 * time.Hour), CertRotateInterval: dur(10 * time.Hour),
		Server: &v1.CertConfig{Duration: dur(2 * time.Minute), RenewBefore: dur(time.Minute)},
	}}
	c, errs := ConfigFrom(s)
	want := Config{CADuration: 48 * time.Hour, CARenewBefore: 12 * time.Hour, ServerDuration: 2 * time.Minute, ServerRenewBefore: time.Minute}
	if len(errs) > 0 || c != want {
		t.Errorf("got %+v %v, want %+v (server.* over certRotateInterval)", c, errs, want)
	}
}

func TestConfigRefusesLifetimesThatCannotRotate(t *testing.T) {
	for name, tc := range map[string]struct {
		s    v1.KubeVirtSelfSignConfiguration
		path string
	}{
		"renew after expiry":   {v1.KubeVirtSelfSignConfiguration{Server: &v1.CertConfig{Duration: dur(time.Hour), RenewBefore: dur(2 * time.Hour)}}, "selfSigned.server.renewBefore"},
		"zero CA duration":     {v1.KubeVirtSelfSignConfiguration{CA: &v1.CertConfig{Duration: dur(0)}}, "selfSigned.ca.duration"},
		"server outlives CA":   {v1.KubeVirtSelfSignConfiguration{CA: &v1.CertConfig{Duration: dur(28 * time.Hour)}}, "selfSigned.server.duration"},
		"negative renewBefore": {v1.KubeVirtSelfSignConfiguration{CA: &v1.CertConfig{RenewBefore: dur(-time.Hour)}}, "selfSigned.ca.renewBefore"},
	} {
		s := tc.s
		_, errs := ConfigFrom(v1.KubeVirtCertificateRotateStrategy{SelfSigned: &s})
		if len(errs) != 1 || !strings.HasSuffix(errs[0].Field, tc.path) {
			t.Errorf("%s: %v, want one error at %s", name, errs, tc.path)
		}
	}
}
