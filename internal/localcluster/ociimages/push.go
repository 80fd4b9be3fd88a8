package ociimages

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Reference is repoTag ("qvirt/virt-handler:v0.1.0") in the plain-HTTP registry at registryAddr
// ("127.0.0.1:5000").
func Reference(registryAddr, repoTag string) (name.Tag, error) {
	tag, err := name.NewTag(registryAddr+"/"+repoTag, name.Insecure, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image reference %s/%s: %w", registryAddr, repoTag, err)
	}
	return tag, nil
}

// Push uploads img to the plain-HTTP registry at registryAddr as repoTag. Blobs the registry
// already has are not sent again. A nil auth is anonymous.
func Push(ctx context.Context, img v1.Image, registryAddr, repoTag string, auth authn.Authenticator) error {
	ref, err := Reference(registryAddr, repoTag)
	if err != nil {
		return err
	}
	if auth == nil {
		auth = authn.Anonymous
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(auth)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
