//go:build tools

// Package registry pins the OCI registry (distribution v3) that the local cluster's nodes pull
// images from: `make nodes` builds it into _tools/node/registry.
package registry

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
