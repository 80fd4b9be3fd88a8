package handler

import (
	"context"
	"net"
	"path/filepath"

	"github.com/qvirt/qvirt/node/safepath"
)

// vmDir is one VM's directory, <VMDirRoot>/<VMI UID>, shared with its launcher pod through a
// hostPath. The pod writes it (root in a container can put any link or file there), so every
// path in it is opened through safepath: no symbolic link is followed, nothing leads out of it,
// and a socket must be a socket owned by the launcher's uid.
type vmDir struct {
	root  string // the node agent's own VMDirRoot
	name  string // the VMI's UID
	owner int    // uid that owns the launcher's and QEMU's sockets
}

func (h *Handler) dirOf(name string) vmDir {
	return vmDir{root: h.opts.VMDirRoot, name: name, owner: h.opts.LauncherUID}
}

func (d vmDir) path() string { return filepath.Join(d.root, d.name) }

// dial connects to the unix socket sock in the directory.
func (d vmDir) dial(ctx context.Context, sock string) (*net.UnixConn, error) {
	return safepath.DialUnix(ctx, d.root, d.name, sock, d.owner)
}
