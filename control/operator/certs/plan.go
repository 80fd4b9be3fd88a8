package certs

import (
	"bytes"
	"crypto/x509"
	"slices"
	"time"

	"github.com/qvirt/qvirt/internal/pki"
)

// A CA rotation never leaves a client without the issuer of the certificate a server shows it:
//  1. a new CA joins the bundle next to the old one, well before the old one expires;
//  2. only once every client can have read that bundle (Propagation) does it sign certificates;
//  3. servers get certificates from it and load them (again within Propagation);
//  4. only then does the old CA leave the bundle.

// CA is one CA of the bundle and when it joined the bundle.
type CA struct {
	Cert  *x509.Certificate
	Added time.Time
}

// Leaf is a certificate the CA signed for a component (by its Secret's name); Cert is nil while
// there is none.
type Leaf struct {
	Name string
	Cert *x509.Certificate
	// Since is when the leaf was first issued by Cert's issuer (renewals by the same CA keep
	// it); zero means Cert's own start.
	Since time.Time
}

// since is when servers began showing certificates of the leaf's current issuer.
func (l Leaf) since() time.Time {
	if !l.Since.IsZero() {
		return l.Since
	}
	return l.Cert.NotBefore.Add(pki.Backdate)
}

// State is what is stored now.
type State struct {
	CAs    []CA
	Leaves []Leaf
	// Unseen says the CA also signs certificates the rotator does not see (another component
	// signs with its key, no longer than the CA lives): an older CA leaves the bundle only when
	// it expires.
	Unseen bool
}

// Plan is what to do now; an empty Plan means nothing is due.
type Plan struct {
	// NewCA: make a CA and add it to the bundle.
	NewCA bool
	// Signer is the CA to sign with (nil when there is none yet, or NewCA is the bootstrap).
	Signer *x509.Certificate
	// Issue names the leaves to issue now, with Signer.
	Issue []string
	// Retire are CAs to take out of the bundle.
	Retire []*x509.Certificate
	// Next is when the next step is due (zero when NewCA must run first).
	Next time.Time
}

// Empty reports a plan with nothing to do now.
func (p Plan) Empty() bool { return !p.NewCA && len(p.Issue) == 0 && len(p.Retire) == 0 }

// Decide plans the rotation of st at now. propagation bounds how long a change of a Secret or
// the bundle takes to reach every component (kubelet sync and the components' file reloads).
func Decide(c Config, st State, propagation time.Duration, now time.Time) Plan {
	var plan Plan
	live := make([]CA, 0, len(st.CAs))
	for _, ca := range st.CAs {
		if now.Before(ca.Cert.NotAfter) {
			live = append(live, ca)
		} else {
			plan.Retire = append(plan.Retire, ca.Cert) // expired: no one can use it
		}
	}
	if len(live) == 0 {
		plan.NewCA = true
		return plan
	}
	slices.SortFunc(live, func(a, b CA) int { return a.Cert.NotBefore.Compare(b.Cert.NotBefore) })
	newest := live[len(live)-1]
	caRenewAt := newest.Cert.NotAfter.Add(-c.CARenewBefore)
	if !now.Before(caRenewAt) || longer(newest.Cert, c.CADuration) {
		plan.NewCA = true // due, or made for a longer lifetime than the one configured now
	}
	plan.Next = caRenewAt

	// The signer is the newest CA every client trusts by now; at installation, when no leaf
	// exists and so nobody relies on any CA yet, the newest signs at once.
	signer := -1
	for i := range live {
		if !now.Before(live[i].Added.Add(propagation)) {
			signer = i
		}
	}
	// A lone CA signs at once: there is no other a client could be relying on.
	if signer < 0 && (len(live) == 1 || !st.Unseen && !anyLeaf(st.Leaves)) {
		signer = len(live) - 1
	}
	// Every CA is younger than the propagation (it was lengthened since they joined): the
	// oldest has been in the bundle longest, so it signs, rather than leave a lost leaf missing.
	if signer < 0 {
		signer = 0
	}
	if signer < len(live)-1 {
		plan.Next = earliest(plan.Next, newest.Added.Add(propagation)) // when the newest may sign
	}
	plan.Signer = live[signer].Cert

	settled := true // every leaf is the signer's, and has been served for long enough
	for _, l := range st.Leaves {
		if l.Cert == nil {
			plan.Issue = append(plan.Issue, l.Name)
			settled = false
			continue
		}
		renewAt := l.Cert.NotAfter.Add(-c.ServerRenewBefore)
		switch {
		case !now.Before(renewAt), longer(l.Cert, c.ServerDuration),
			!signedBy(l.Cert, plan.Signer) && plan.Signer.NotBefore.After(issuerOf(l.Cert, live).NotBefore):
			plan.Issue = append(plan.Issue, l.Name)
			settled = false
		default:
			plan.Next = earliest(plan.Next, renewAt)
			if !signedBy(l.Cert, plan.Signer) {
				settled = false
			} else if loaded := l.since().Add(propagation); now.Before(loaded) {
				settled = false
				plan.Next = earliest(plan.Next, loaded)
			}
		}
	}
	if st.Unseen {
		settled = false
	}
	if settled {
		for _, ca := range live[:signer] {
			plan.Retire = append(plan.Retire, ca.Cert)
		}
	}
	return plan
}

// longer reports a certificate made to live longer than d (beyond the backdating of its start).
func longer(cert *x509.Certificate, d time.Duration) bool {
	return cert.NotAfter.Sub(cert.NotBefore) > d+2*pki.Backdate
}

func anyLeaf(leaves []Leaf) bool {
	for _, l := range leaves {
		if l.Cert != nil {
			return true
		}
	}
	return false
}

func signedBy(cert, ca *x509.Certificate) bool {
	return bytes.Equal(cert.RawIssuer, ca.RawSubject) && cert.CheckSignatureFrom(ca) == nil
}

// issuerOf is the live CA that signed cert; a leaf of an unknown CA counts as the oldest's.
func issuerOf(cert *x509.Certificate, live []CA) *x509.Certificate {
	for _, ca := range live {
		if signedBy(cert, ca.Cert) {
			return ca.Cert
		}
	}
	return &x509.Certificate{}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
