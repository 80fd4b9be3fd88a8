package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/qvirt/qvirt/internal/pki"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serials int64

func mint(t *testing.T, name string, from time.Time, life time.Duration, parent *testCA) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serials++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serials), Subject: pkix.Name{CommonName: name},
		NotBefore: from, NotAfter: from.Add(life), BasicConstraintsValid: true, IsCA: parent == nil,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

const prop = 2 * time.Minute

func defaults(t *testing.T) Config {
	c, errs := ConfigFrom(noStrategy)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return c
}

func TestInstallMakesACAThenSignsEveryLeafAtOnce(t *testing.T) {
	c := defaults(t)
	leaves := []Leaf{{Name: "kubevirt-virt-api-certs"}, {Name: "kubevirt-virt-handler-certs"}}
	if p := Decide(c, State{Leaves: leaves}, prop, t0); !p.NewCA || len(p.Issue) != 0 {
		t.Fatalf("nothing stored: %+v, want a new CA first", p)
	}
	ca := mint(t, "ca", t0, c.CADuration, nil)
	p := Decide(c, State{CAs: []CA{{Cert: ca.cert, Added: t0}}, Leaves: leaves}, prop, t0)
	if p.NewCA || p.Signer != ca.cert || !slices.Equal(p.Issue, []string{"kubevirt-virt-api-certs", "kubevirt-virt-handler-certs"}) {
		t.Fatalf("a fresh CA and no leaves: %+v, want every leaf signed now", p)
	}
}

func TestServerCertificatesAreRenewedBeforeTheyExpire(t *testing.T) {
	c := defaults(t)
	ca := mint(t, "ca", t0, c.CADuration, nil)
	leaf := mint(t, "api", t0, c.ServerDuration, ca)
	st := State{CAs: []CA{{Cert: ca.cert, Added: t0}}, Leaves: []Leaf{{Name: "api", Cert: leaf.cert}}}
	renewAt := t0.Add(c.ServerDuration - c.ServerRenewBefore)
	if p := Decide(c, st, prop, renewAt.Add(-time.Second)); !p.Empty() || !p.Next.Equal(renewAt) {
		t.Errorf("before the renewal: %+v, want nothing until %v", p, renewAt)
	}
	if p := Decide(c, st, prop, renewAt); !slices.Equal(p.Issue, []string{"api"}) || p.Signer != ca.cert {
		t.Errorf("at the renewal: %+v, want api re-signed", p)
	}
}

// TestCARotationKeepsBothCAsUntilTheServersMoved walks a whole CA rotation: at no step is a
// leaf in use whose CA has left the bundle, and no leaf is signed by a CA clients may not have.
func TestCARotationKeepsBothCAsUntilTheServersMoved(t *testing.T) {
	c := Config{CADuration: 10 * time.Hour, CARenewBefore: 3 * time.Hour, ServerDuration: 2 * time.Hour, ServerRenewBefore: 30 * time.Minute}
	old := mint(t, "old", t0, c.CADuration, nil)
	leaf := mint(t, "api", t0.Add(6*time.Hour), c.ServerDuration, old)
	st := State{CAs: []CA{{Cert: old.cert, Added: t0}}, Leaves: []Leaf{{Name: "api", Cert: leaf.cert}}}

	now := t0.Add(7 * time.Hour) // the old CA is due for renewal
	p := Decide(c, st, prop, now)
	if !p.NewCA || len(p.Issue) != 0 || len(p.Retire) != 0 {
		t.Fatalf("CA due: %+v, want a new CA and nothing else", p)
	}
	fresh := mint(t, "new", now, c.CADuration, nil)
	st.CAs = append(st.CAs, CA{Cert: fresh.cert, Added: now})

	// Until clients can have the new bundle, the old CA still signs and nothing is retired.
	p = Decide(c, st, prop, now.Add(prop/2))
	if p.NewCA || p.Signer != old.cert || len(p.Issue) != 0 || len(p.Retire) != 0 || !p.Next.Equal(now.Add(prop)) {
		t.Fatalf("new CA not yet propagated: %+v", p)
	}
	// Then the servers move to the new CA; the old one stays in the bundle.
	now = now.Add(prop)
	p = Decide(c, st, prop, now)
	if p.Signer != fresh.cert || !slices.Equal(p.Issue, []string{"api"}) || len(p.Retire) != 0 {
		t.Fatalf("new CA propagated: %+v, want api re-signed by it and the old CA kept", p)
	}
	moved := mint(t, "api", now.Add(-pki.Backdate), c.ServerDuration, fresh) // as pki signs
	st.Leaves[0].Cert = moved.cert
	// While servers may still show the old certificate, the old CA stays.
	if p = Decide(c, st, prop, now.Add(prop/2)); len(p.Retire) != 0 || len(p.Issue) != 0 {
		t.Fatalf("leaf just moved: %+v, want the old CA kept a while", p)
	}
	p = Decide(c, st, prop, now.Add(prop))
	if len(p.Retire) != 1 || p.Retire[0] != old.cert || p.NewCA || len(p.Issue) != 0 {
		t.Fatalf("leaf moved and loaded: %+v, want the old CA retired", p)
	}
}

func TestExpiredOrForeignCertificatesAreReplaced(t *testing.T) {
	c := defaults(t)
	ca := mint(t, "ca", t0, c.CADuration, nil)
	stranger := mint(t, "other", t0, c.CADuration, nil)
	foreign := mint(t, "api", t0, c.ServerDuration, stranger)
	p := Decide(c, State{CAs: []CA{{Cert: ca.cert, Added: t0}}, Leaves: []Leaf{{Name: "api", Cert: foreign.cert}}}, prop, t0.Add(time.Hour))
	if !slices.Equal(p.Issue, []string{"api"}) {
		t.Errorf("leaf of a CA not in the bundle: %+v, want it re-signed", p)
	}
	p = Decide(c, State{CAs: []CA{{Cert: ca.cert, Added: t0}}}, prop, t0.Add(c.CADuration))
	if !p.NewCA || len(p.Retire) != 1 {
		t.Errorf("expired CA: %+v, want it retired and a new one", p)
	}
}

func TestACAWhoseCertificatesAnotherSignerIssuesStaysUntilItExpires(t *testing.T) {
	c := Config{CADuration: 10 * time.Hour, CARenewBefore: 3 * time.Hour, ServerDuration: 2 * time.Hour, ServerRenewBefore: 30 * time.Minute}
	old := mint(t, "old", t0, c.CADuration, nil)
	st := State{CAs: []CA{{Cert: old.cert, Added: t0}}, Unseen: true}
	if p := Decide(c, st, prop, t0.Add(time.Minute)); p.Signer != old.cert || !p.Empty() {
		t.Fatalf("one CA: %+v, want it to sign at once", p)
	}
	now := t0.Add(7 * time.Hour)
	fresh := mint(t, "new", now, c.CADuration, nil)
	st.CAs = append(st.CAs, CA{Cert: fresh.cert, Added: now})
	// With no leaf of its own to watch, the new CA still waits for the bundle to propagate.
	if p := Decide(c, st, prop, now.Add(prop/2)); p.Signer != old.cert || !p.Empty() {
		t.Fatalf("new CA not yet propagated: %+v, want the old one still signing", p)
	}
	if p := Decide(c, st, prop, now.Add(prop)); p.Signer != fresh.cert || !p.Empty() {
		t.Fatalf("new CA propagated: %+v, want it signing and the old one kept", p)
	}
	if p := Decide(c, st, prop, old.cert.NotAfter.Add(-time.Second)); len(p.Retire) != 0 {
		t.Fatalf("old CA about to expire: %+v, want it kept: certificates it signed may still be in use", p)
	}
	if p := Decide(c, st, prop, old.cert.NotAfter); len(p.Retire) != 1 || p.Retire[0] != old.cert {
		t.Fatalf("old CA expired: %+v, want it retired", p)
	}
}

func TestALeafLostRightAfterInstallationIsReissuedAtOnce(t *testing.T) {
	c := defaults(t)
	ca := mint(t, "ca", t0, c.CADuration, nil)
	kept := mint(t, "api", t0, c.ServerDuration, ca)
	st := State{CAs: []CA{{Cert: ca.cert, Added: t0}}, Leaves: []Leaf{{Name: "api", Cert: kept.cert}, {Name: "client"}}}
	p := Decide(c, st, prop, t0.Add(prop/4))
	if p.Signer != ca.cert || !slices.Equal(p.Issue, []string{"client"}) {
		t.Fatalf("one CA, one leaf deleted: %+v, want it reissued by the only CA now", p)
	}
}

func TestShorterLifetimesTakeEffectAtOnce(t *testing.T) {
	long := defaults(t)
	ca := mint(t, "ca", t0, long.CADuration, nil)
	leaf := mint(t, "api", t0, long.ServerDuration, ca)
	st := State{CAs: []CA{{Cert: ca.cert, Added: t0}}, Leaves: []Leaf{{Name: "api", Cert: leaf.cert}}}
	short := Config{CADuration: 8 * time.Minute, CARenewBefore: 5 * time.Minute, ServerDuration: 2 * time.Minute, ServerRenewBefore: 30 * time.Second}
	now := t0.Add(time.Hour)
	if p := Decide(long, st, prop, now); !p.Empty() {
		t.Fatalf("nothing changed: %+v, want nothing to do", p)
	}
	p := Decide(short, st, prop, now)
	if !p.NewCA || !slices.Equal(p.Issue, []string{"api"}) || p.Signer != ca.cert {
		t.Fatalf("lifetimes shortened: %+v, want a new CA and the leaf reissued by the current one meanwhile", p)
	}
}

func TestRenewalsByTheSameCADoNotHoldBackRetiringTheOldOne(t *testing.T) {
	c := Config{CADuration: 8 * time.Minute, CARenewBefore: 5 * time.Minute, ServerDuration: 2 * time.Minute, ServerRenewBefore: 40 * time.Second}
	old := mint(t, "old", t0, c.CADuration, nil)
	fresh := mint(t, "new", t0.Add(3*time.Minute), c.CADuration, nil)
	moved := t0.Add(3*time.Minute + prop) // the leaf moved to the new CA when it could sign
	now := moved.Add(prop + time.Second)
	// Renewed since by the same CA, just now: its Since is still the move.
	renewed := mint(t, "api", now.Add(-pki.Backdate-time.Second), c.ServerDuration, fresh)
	st := State{CAs: []CA{{Cert: old.cert, Added: t0}, {Cert: fresh.cert, Added: t0.Add(3 * time.Minute)}},
		Leaves: []Leaf{{Name: "api", Cert: renewed.cert, Since: moved}}}
	if p := Decide(c, st, prop, now); len(p.Retire) != 1 || p.Retire[0] != old.cert {
		t.Fatalf("servers on the new CA for longer than the propagation: %+v, want the old CA retired", p)
	}
}

func TestALeafLostAfterThePropagationWasLengthenedIsReissuedByTheOldestCA(t *testing.T) {
	c := Config{CADuration: 8 * time.Minute, CARenewBefore: 5 * time.Minute, ServerDuration: 2 * time.Minute, ServerRenewBefore: 40 * time.Second}
	older := mint(t, "older", t0, c.CADuration, nil)
	newer := mint(t, "newer", t0.Add(30*time.Second), c.CADuration, nil)
	kept := mint(t, "api", t0.Add(30*time.Second), c.ServerDuration, newer)
	// Both CAs joined the bundle less than the (now longer) propagation ago.
	st := State{CAs: []CA{{Cert: older.cert, Added: t0}, {Cert: newer.cert, Added: t0.Add(30 * time.Second)}},
		Leaves: []Leaf{{Name: "api", Cert: kept.cert}, {Name: "client"}}}
	p := Decide(c, st, prop, t0.Add(time.Minute))
	if p.Signer != older.cert || !slices.Equal(p.Issue, []string{"client"}) || len(p.Retire) != 0 {
		t.Fatalf("no CA propagated yet, one leaf deleted: %+v, want it reissued by the oldest CA and nothing retired", p)
	}
	if maySign := t0.Add(30*time.Second + prop); p.Next.IsZero() || p.Next.After(maySign) {
		t.Fatalf("next look at %v, want no later than when the newer CA may sign (%v)", p.Next, maySign)
	}
}
