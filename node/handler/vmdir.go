package handler

import (
	"context"
	"net"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qvirt/qvirt/node/safepath"
)

// DefaultKubeletPodsDir is the kubelet's directory of pods.
const DefaultKubeletPodsDir = "/var/lib/kubelet/pods"

// vmDirVolume is the launcher pod's emptyDir that holds its VM's sockets and files
// (launcherpod.VMDirVolumeName), and emptyDirPlugin the kubelet's directory of a pod's emptyDirs.
const (
	vmDirVolume    = "vm-dir"
	emptyDirPlugin = "kubernetes.io~empty-dir"
)

// vmDir is one VM's directory: the vm-dir emptyDir of its launcher pod on this node, in the
// kubelet's pod directory. The pod writes it (anything in the container can put any link or
// file there), so every path in it is opened through safepath: no symbolic link is followed,
// nothing leads out of it, and a socket must be a socket owned by the launcher's uid.
type vmDir struct {
	h   *Handler
	ns  string
	vmi types.UID
}

func (h *Handler) dirOf(ns string, vmi types.UID) vmDir { return vmDir{h: h, ns: ns, vmi: vmi} }

// root is the directory of the launcher pod's emptyDirs: the pod running the VM on this node
// now (after a migration back, not the one that ran it before).
func (d vmDir) root(ctx context.Context) (string, error) {
	pod, err := d.h.launcherPodOf(ctx, d.ns, d.vmi)
	if err != nil {
		return "", err
	}
	return filepath.Join(d.h.opts.KubeletPodsDir, string(pod.UID), "volumes", emptyDirPlugin), nil
}

// open opens the directory (safepath.OpenDir), to make sockets in it.
func (d vmDir) open(ctx context.Context) (*safepath.Dir, error) {
	root, err := d.root(ctx)
	if err != nil {
		return nil, err
	}
	return safepath.OpenDir(root, vmDirVolume)
}

// path is the directory itself.
func (d vmDir) path(ctx context.Context) (string, error) {
	root, err := d.root(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, vmDirVolume), nil
}

// dial connects to the unix socket sock in the directory.
func (d vmDir) dial(ctx context.Context, sock string) (*net.UnixConn, error) {
	root, err := d.root(ctx)
	if err != nil {
		return nil, err
	}
	return safepath.DialUnix(ctx, root, vmDirVolume, sock, d.h.opts.LauncherUID)
}
