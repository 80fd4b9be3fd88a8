package certs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/qvirt/qvirt/internal/pki"
)

// Names KubeVirt gives the CA: the Secret holding it (with its key) and the ConfigMap holding
// the bundle every client trusts.
const (
	CASecretName     = "kubevirt-ca"
	BundleConfigMap  = "kubevirt-ca"
	BundleKey        = "ca-bundle"
	addedAnnotation  = "ca-added.qvirt.io/"
	sinceAnnotation  = "issuer-since.qvirt.io"
	caCommonNameBase = "kubevirt.io"
)

// LeafSpec is a certificate the installation needs, stored as Secret (tls.crt, tls.key).
type LeafSpec struct {
	Secret  string
	Request pki.Request
}

// Rotator keeps the CA, the bundle and the leaves of one namespace as Decide says, and puts the
// bundle into the webhook configurations and APIServices that name the components' Services.
type Rotator struct {
	// CASecret and BundleConfigMap name where the CA and its bundle are kept (default
	// KubeVirt's: CASecretName, BundleConfigMap).
	CASecret, BundleConfigMap string
	// Labels go on every Secret and ConfigMap the rotator creates.
	Labels map[string]string
	// Unseen: see State.
	Unseen      bool
	Kube        kubernetes.Interface
	Aggregator  aggregator.Interface
	Namespace   string
	Config      Config
	Propagation time.Duration
	Leaves      []LeafSpec
	// Webhook configurations and APIServices whose caBundle is the bundle.
	ValidatingWebhooks, MutatingWebhooks, APIServices []string
}

// stored is the CA Secret's content: every CA of the bundle with its key, and which one is
// tls.crt.
type stored struct {
	cas    []CA
	keys   map[string]crypto.Signer // by serial
	signer []byte
}

func (r *Rotator) caSecret() string {
	if r.CASecret == "" {
		return CASecretName
	}
	return r.CASecret
}

func (r *Rotator) bundleConfigMap() string {
	if r.BundleConfigMap == "" {
		return BundleConfigMap
	}
	return r.BundleConfigMap
}

// Bundle is the CA bundle published now (PEM), empty before the first Sync.
func (r *Rotator) Bundle(ctx context.Context) ([]byte, error) {
	cm, err := r.Kube.CoreV1().ConfigMaps(r.Namespace).Get(ctx, r.bundleConfigMap(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []byte(cm.Data[BundleKey]), nil
}

// Sync carries out what is due and returns when the next step is due.
func (r *Rotator) Sync(ctx context.Context) (time.Time, error) {
	for range 3 { // a new CA at installation is followed at once by its leaves
		st, leaves, err := r.load(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		plan := Decide(r.Config, State{CAs: st.cas, Leaves: leaves, Unseen: r.Unseen}, r.Propagation, now)
		if plan.Empty() {
			if plan.Signer != nil && !bytes.Equal(st.signer, certPEM(plan.Signer)) {
				if err := r.save(ctx, st, plan.Signer); err != nil {
					return time.Time{}, err
				}
			}
			return plan.Next, r.publish(ctx, st)
		}
		if err := r.apply(ctx, st, leaves, plan, now); err != nil {
			return time.Time{}, err
		}
	}
	return time.Now().Add(time.Second), nil
}

func (r *Rotator) apply(ctx context.Context, st *stored, leaves []Leaf, plan Plan, now time.Time) error {
	for _, old := range plan.Retire {
		st.cas = removeCA(st.cas, old)
		delete(st.keys, serialOf(old))
	}
	if plan.NewCA {
		ca, err := pki.NewCA(fmt.Sprintf("%s@%d", caCommonNameBase, now.Unix()), r.Config.CADuration)
		if err != nil {
			return err
		}
		st.cas = append(st.cas, CA{Cert: ca.Cert, Added: now})
		st.keys[serialOf(ca.Cert)] = ca.Key
	}
	// The bundle goes out before any certificate its new CA signs.
	if err := r.save(ctx, st, plan.Signer); err != nil {
		return err
	}
	if err := r.publish(ctx, st); err != nil {
		return err
	}
	if len(plan.Issue) == 0 || plan.Signer == nil {
		return nil
	}
	key := st.keys[serialOf(plan.Signer)]
	if key == nil {
		return fmt.Errorf("secret %s/%s has no key for CA %s", r.Namespace, r.caSecret(), serialOf(plan.Signer))
	}
	signer := &pki.CA{Cert: plan.Signer, Key: key}
	for _, name := range plan.Issue {
		spec, ok := r.leaf(name)
		if !ok {
			continue
		}
		req := spec.Request
		req.Lifetime = r.Config.ServerDuration
		kp, err := signer.Sign(req)
		if err != nil {
			return fmt.Errorf("signing %s: %w", name, err)
		}
		since := now
		for _, l := range leaves {
			if l.Name == name && l.Cert != nil && signedBy(l.Cert, plan.Signer) {
				since = l.since() // a renewal by the same CA
			}
		}
		ann := map[string]string{sinceAnnotation: since.UTC().Format(time.RFC3339)}
		if err := r.writeSecret(ctx, name, map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": bundlePEM(st.cas)}, ann); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rotator) leaf(name string) (LeafSpec, bool) {
	for _, l := range r.Leaves {
		if l.Secret == name {
			return l, true
		}
	}
	return LeafSpec{}, false
}

// load reads the CA Secret and the leaves' Secrets; what is missing or unreadable is absent.
func (r *Rotator) load(ctx context.Context) (*stored, []Leaf, error) {
	st := &stored{keys: map[string]crypto.Signer{}}
	sec, err := r.Kube.CoreV1().Secrets(r.Namespace).Get(ctx, r.caSecret(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, nil, err
	default:
		st.signer = sec.Data["tls.crt"]
		for k, v := range sec.Data {
			serial, ok := strings.CutSuffix(k, ".crt")
			if !ok || k == "tls.crt" {
				continue
			}
			cert, err := parseCert(v)
			if err != nil {
				continue
			}
			key, err := pki.ParseKey(sec.Data[serial+".key"])
			if err != nil {
				continue
			}
			added, _ := time.Parse(time.RFC3339, sec.Annotations[addedAnnotation+serial])
			st.cas = append(st.cas, CA{Cert: cert, Added: added})
			st.keys[serial] = key
		}
	}
	var leaves []Leaf
	for _, l := range r.Leaves {
		leaf := Leaf{Name: l.Secret}
		s, err := r.Kube.CoreV1().Secrets(r.Namespace).Get(ctx, l.Secret, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
		if err == nil {
			leaf.Cert, _ = parseCert(s.Data["tls.crt"])
			leaf.Since, _ = time.Parse(time.RFC3339, s.Annotations[sinceAnnotation])
		}
		leaves = append(leaves, leaf)
	}
	return st, leaves, nil
}

// save writes the CA Secret: each CA under its serial, and the one to sign with (signer, else
// the newest) also as tls.crt and tls.key, for a component that signs with it.
func (r *Rotator) save(ctx context.Context, st *stored, signer *x509.Certificate) error {
	data := map[string][]byte{}
	ann := map[string]string{}
	var newest *CA
	for i := range st.cas {
		ca := &st.cas[i]
		serial := serialOf(ca.Cert)
		keyPEM, err := (&pki.CA{Cert: ca.Cert, Key: st.keys[serial]}).KeyPEM()
		if err != nil {
			return err
		}
		data[serial+".crt"] = certPEM(ca.Cert)
		data[serial+".key"] = keyPEM
		ann[addedAnnotation+serial] = ca.Added.UTC().Format(time.RFC3339)
		if newest == nil || ca.Cert.NotBefore.After(newest.Cert.NotBefore) {
			newest = ca
		}
	}
	if signer == nil && newest != nil {
		signer = newest.Cert
	}
	if signer != nil {
		serial := serialOf(signer)
		data["tls.crt"], data["tls.key"] = data[serial+".crt"], data[serial+".key"]
		st.signer = data["tls.crt"]
	}
	return r.writeSecret(ctx, r.caSecret(), data, ann)
}

func (r *Rotator) writeSecret(ctx context.Context, name string, data map[string][]byte, ann map[string]string) error {
	secrets := r.Kube.CoreV1().Secrets(r.Namespace)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace, Annotations: ann, Labels: r.Labels}, Type: corev1.SecretTypeOpaque, Data: data}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cur.Data = data
	if ann != nil {
		for k := range cur.Annotations {
			if strings.HasPrefix(k, addedAnnotation) {
				delete(cur.Annotations, k)
			}
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		for k, v := range ann {
			cur.Annotations[k] = v
		}
	}
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// publish puts the bundle into the ConfigMap, the webhook configurations and the APIServices,
// writing only what differs.
func (r *Rotator) publish(ctx context.Context, st *stored) error {
	bundle := bundlePEM(st.cas)
	if len(bundle) == 0 {
		return nil
	}
	cms := r.Kube.CoreV1().ConfigMaps(r.Namespace)
	cm, err := cms.Get(ctx, r.bundleConfigMap(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.bundleConfigMap(), Namespace: r.Namespace, Labels: r.Labels}, Data: map[string]string{BundleKey: string(bundle)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	case err != nil:
		return err
	case cm.Data[BundleKey] != string(bundle):
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[BundleKey] = string(bundle)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	adm := r.Kube.AdmissionregistrationV1()
	for _, name := range r.ValidatingWebhooks {
		w, err := adm.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // created with the bundle in place
		}
		if err != nil {
			return err
		}
		if setBundles(bundle, len(w.Webhooks), func(i int) *[]byte { return &w.Webhooks[i].ClientConfig.CABundle }) {
			if _, err := adm.ValidatingWebhookConfigurations().Update(ctx, w, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	for _, name := range r.MutatingWebhooks {
		w, err := adm.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if setBundles(bundle, len(w.Webhooks), func(i int) *[]byte { return &w.Webhooks[i].ClientConfig.CABundle }) {
			if _, err := adm.MutatingWebhookConfigurations().Update(ctx, w, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	for _, name := range r.APIServices {
		svc, err := r.Aggregator.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if setBundle(&svc.Spec.CABundle, bundle) {
			if _, err := r.Aggregator.ApiregistrationV1().APIServices().Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// setBundles sets the n caBundles at(i) gives; true if any changed.
func setBundles(bundle []byte, n int, at func(int) *[]byte) bool {
	changed := false
	for i := range n {
		changed = setBundle(at(i), bundle) || changed
	}
	return changed
}

func setBundle(dst *[]byte, bundle []byte) bool {
	if bytes.Equal(*dst, bundle) {
		return false
	}
	*dst = append([]byte(nil), bundle...)
	return true
}

// bundlePEM is every CA, oldest first, so the bundle reads the same whatever order they were
// stored in.
func bundlePEM(cas []CA) []byte {
	sorted := append([]CA(nil), cas...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Cert.NotBefore.Before(sorted[j].Cert.NotBefore) })
	var b []byte
	for _, ca := range sorted {
		b = append(b, certPEM(ca.Cert)...)
	}
	return b
}

func removeCA(cas []CA, cert *x509.Certificate) []CA {
	out := cas[:0]
	for _, ca := range cas {
		if !ca.Cert.Equal(cert) {
			out = append(out, ca)
		}
	}
	return out
}

func serialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
