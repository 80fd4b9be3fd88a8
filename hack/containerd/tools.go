//go:build tools

// Package containerd pins containerd v2 (daemon, runc shim, ctr) for the local cluster's nodes:
// `make nodes` builds them from this module into _tools/node/. Kubernetes image volumes need
// containerd 2.1 or newer, so Debian's 1.6 does not do.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
