package api

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/internal/tlsfiles"
)

// User is the caller as the aggregation layer vouches for it.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// RequestHeaderAuth trusts X-Remote-* headers only on connections whose client certificate is
// signed by the requestheader CA and names an allowed proxy: that is the kube-apiserver's
// aggregation layer, which has already authenticated the user.
type RequestHeaderAuth struct {
	CA *tlsfiles.CAPool
	// AllowedNames are the accepted proxy certificate common names; empty accepts any name the
	// CA signed.
	AllowedNames  []string
	UserHeaders   []string
	GroupHeaders  []string
	ExtraPrefixes []string
}

// Authenticate returns the forwarded user, or an Unauthorized error.
func (a *RequestHeaderAuth) Authenticate(r *http.Request) (User, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return User{}, unauthorized("a client certificate from the aggregation layer is required")
	}
	pool, err := a.CA.Pool()
	if err != nil {
		return User{}, err
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return User{}, unauthorized("client certificate not signed by the requestheader CA: %v", err)
	}
	if len(a.AllowedNames) > 0 && !slices.Contains(a.AllowedNames, leaf.Subject.CommonName) {
		return User{}, unauthorized("proxy %q is not an allowed requestheader client", leaf.Subject.CommonName)
	}
	u := User{Extra: map[string][]string{}}
	for _, h := range orDefault(a.UserHeaders, "X-Remote-User") {
		if v := r.Header.Get(h); v != "" {
			u.Name = v
			break
		}
	}
	if u.Name == "" {
		return User{}, unauthorized("no user in the request headers")
	}
	for _, h := range orDefault(a.GroupHeaders, "X-Remote-Group") {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for _, p := range orDefault(a.ExtraPrefixes, "X-Remote-Extra-") {
		for h, vs := range r.Header {
			if key, ok := strings.CutPrefix(strings.ToLower(h), strings.ToLower(p)); ok && key != "" {
				// Header names are case-insensitive, so extra keys travel escaped and lower-case.
				if k, err := url.PathUnescape(key); err == nil {
					key = k
				}
				u.Extra[key] = append(u.Extra[key], vs...)
			}
		}
	}
	return u, nil
}

func orDefault(v []string, def string) []string {
	if len(v) == 0 {
		return []string{def}
	}
	return v
}

// SARAuthorizer asks the kube-apiserver whether a user may act on a subresource.
type SARAuthorizer struct {
	Client func() kubernetes.Interface
}

// Allowed sends a SubjectAccessReview for group subresources.kubevirt.io.
func (a *SARAuthorizer) Allowed(ctx context.Context, u User, verb, namespace, resource, subresource, name string) (bool, string, error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Name, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: GroupName, Version: "v1",
			Resource: resource, Subresource: subresource, Name: name,
		},
	}}
	res, err := a.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	return res.Status.Allowed, res.Status.Reason, nil
}
