package images

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Normalize returns ref in the form Kubernetes' container runtimes compare images by: an explicit
// registry (docker.io for short names, with library/ for single-component names) and a tag
// (latest when the reference has neither tag nor digest). localhost/qvirt/tiny-disk becomes
// localhost/qvirt/tiny-disk:latest; busybox becomes docker.io/library/busybox:latest.
func Normalize(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	repo := r.Context()
	registry := repo.RegistryStr()
	// go-containerregistry names Docker Hub index.docker.io; Kubernetes and containerd say docker.io.
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	base := registry + "/" + repo.RepositoryStr()
	switch r := r.(type) {
	case name.Digest:
		return base + "@" + r.DigestStr(), nil
	case name.Tag:
		return base + ":" + r.TagStr(), nil
	}
	return "", fmt.Errorf("image reference %q: neither tag nor digest", ref)
}

// splitDigest splits a normalised reference into repository and digest ("" when it has a tag).
func splitDigest(ref string) (repo, digest string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		return ref[:i], ref[i+1:]
	}
	return "", ""
}

// repository is the normalised reference without tag or digest.
func repository(ref string) string {
	if repo, _ := splitDigest(ref); repo != "" {
		return repo
	}
	// The tag follows the last colon after the last slash (a registry port comes before a slash).
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return ref[:i]
	}
	return ref
}
