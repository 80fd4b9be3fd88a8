package handler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/hotplugvol"
	"github.com/qvirt/qvirt/node/launcherspec"
	"github.com/qvirt/qvirt/node/safepath"
)

// The attachment pod's emptyDir and socket (launcherpod.HotplugSocketVolumeName and
// HotplugSocketName), and the disk image of a Filesystem claim.
const (
	hotplugSocketVolume = "hotplug"
	hotplugSocket       = "volumes.sock"
	claimImage          = "disk.img"
)

// hotplugTimeout bounds one round of attaching and detaching: QEMU waits for the guest to
// release a virtio disk.
const hotplugTimeout = 90 * time.Second

// syncHotplug makes the running QEMU's hotplugged disks those of the spec whose attachment pods
// are ready, and starts the memory dump of a memoryDump volume that has just been attached. It
// returns the launcher's status afterwards (ls when nothing changed).
func (h *Handler) syncHotplug(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn, ls *launcherapi.StatusResponse) (*launcherapi.StatusResponse, error) {
	if !running(ls) || movedAway(ls) {
		return ls, nil
	}
	attached := map[string]bool{}
	for _, d := range ls.GetHotpluggedDisks() {
		attached[d.Name] = true
	}
	statuses := map[string]*v1.VolumeStatus{}
	for i := range vmi.Status.VolumeStatus {
		statuses[vmi.Status.VolumeStatus[i].Name] = &vmi.Status.VolumeStatus[i]
	}
	log := ctrl.LoggerFrom(ctx)
	var disks []*launcherapi.Disk
	var handErr error
	changed := false
	want := map[string]bool{}
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if vol.PersistentVolumeClaim == nil || !vol.IsHotplugged() {
			continue
		}
		vs := statuses[vol.Name]
		block := vs != nil && vs.PersistentVolumeClaimInfo != nil && isBlockClaim(vs.PersistentVolumeClaimInfo)
		fdName := "hotplug-" + vol.Name
		if !attached[vol.Name] {
			uid := attachPod(vs)
			if uid == "" {
				continue // its attachment pod is not ready on this node yet
			}
			req := hotplugvol.Request{}
			if !block {
				req = hotplugvol.Request{File: claimImage, CreateBytes: launcherspec.ImageBytes(vs.PersistentVolumeClaimInfo)}
			}
			if err := h.handOver(ctx, lc, uid, fdName, req); err != nil {
				// Retried soon: the attachment pod may be a moment from serving.
				handErr = fmt.Errorf("handing volume %s to the launcher: %w", vol.Name, err)
				continue
			}
			changed = true
		}
		d, err := launcherspec.HotplugDisk(vmi, vol.Name, fdName, block)
		if err != nil {
			log.Error(err, "hotplugged volume", "volume", vol.Name)
			continue
		}
		want[vol.Name] = true
		disks = append(disks, d)
	}
	for name := range attached {
		changed = changed || !want[name]
	}
	if changed {
		hctx, cancel := context.WithTimeout(ctx, hotplugTimeout)
		next, err := lc.client.HotplugDisks(hctx, &launcherapi.HotplugDisksRequest{Disks: disks})
		cancel()
		if err != nil {
			return ls, fmt.Errorf("hotplugging disks: %w", err)
		}
		log.Info("hotplugged disks", "attached", len(next.GetHotpluggedDisks()))
		ls = next
	}
	ls, err := h.startMemoryDump(ctx, vmi, lc, ls)
	if err == nil {
		err = handErr
	}
	return ls, err
}

// startMemoryDump starts writing the guest's memory into a memoryDump volume that is attached and
// has no dump yet.
func (h *Handler) startMemoryDump(ctx context.Context, vmi *v1.VirtualMachineInstance, lc *launcherConn, ls *launcherapi.StatusResponse) (*launcherapi.StatusResponse, error) {
	if md := ls.GetMemoryDump(); md != nil && md.State == "active" {
		return ls, nil
	}
	for _, vs := range vmi.Status.VolumeStatus {
		uid := attachPod(&vs)
		if vs.MemoryDumpVolume == nil || uid == "" || vs.Phase != v1.HotplugVolumeAttachedToNode || !inSpec(vmi, vs.Name) {
			continue
		}
		if md, _ := dumpOf(ls, &vs); md != nil {
			continue // started before a restart of this agent
		}
		file := fmt.Sprintf("%s-%s-%s.memory.dump", vmi.Name, vs.Name, time.Now().UTC().Format("20060102-150405"))
		fdName := "memorydump-" + vs.Name
		if err := h.handOver(ctx, lc, uid, fdName, hotplugvol.Request{File: file, NewFile: true}); err != nil {
			return ls, fmt.Errorf("memory dump volume %s: %w", vs.Name, err)
		}
		next, err := lc.client.DumpMemory(ctx, &launcherapi.DumpMemoryRequest{FdName: fdName, Id: dumpID(&vs, file)})
		if err != nil {
			return ls, fmt.Errorf("memory dump into %s: %w", vs.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("memory dump started", "volume", vs.Name, "file", file)
		return next, nil
	}
	return ls, nil
}

// handOver asks the attachment pod uid for a descriptor and passes it to the launcher as fdName.
func (h *Handler) handOver(ctx context.Context, lc *launcherConn, uid types.UID, fdName string, req hotplugvol.Request) error {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	root := filepath.Join(h.opts.KubeletPodsDir, string(uid), "volumes", emptyDirPlugin)
	conn, err := safepath.DialUnix(dctx, root, hotplugSocketVolume, hotplugSocket, h.opts.LauncherUID)
	if err != nil {
		return fmt.Errorf("attachment pod %s: %w", uid, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	f, _, err := hotplugvol.Open(conn, req)
	if err != nil {
		return fmt.Errorf("attachment pod %s: %w", uid, err)
	}
	defer f.Close()
	return lc.sendTaps(map[string]*os.File{fdName: f})
}

// attachPod is the ready attachment pod of a volume, "" while there is none.
func attachPod(vs *v1.VolumeStatus) types.UID {
	if vs == nil || vs.HotplugVolume == nil {
		return ""
	}
	return vs.HotplugVolume.AttachPodUID
}

func isBlockClaim(info *v1.PersistentVolumeClaimInfo) bool {
	return info.VolumeMode != nil && *info.VolumeMode == corev1.PersistentVolumeBlock
}

func inSpec(vmi *v1.VirtualMachineInstance, volume string) bool {
	for _, v := range vmi.Spec.Volumes {
		if v.Name == volume {
			return true
		}
	}
	return false
}

// dumpID names a dump by the attachment pod it goes through, so that a later dump into the same
// claim (another attachment pod) is not taken for this one.
func dumpID(vs *v1.VolumeStatus, file string) string {
	return string(attachPod(vs)) + "/" + vs.Name + "/" + file
}

// dumpOf is the launcher's dump into this volume's current attachment, and its file name.
func dumpOf(ls *launcherapi.StatusResponse, vs *v1.VolumeStatus) (*launcherapi.MemoryDumpStatus, string) {
	md := ls.GetMemoryDump()
	uid := attachPod(vs)
	if md == nil || uid == "" {
		return nil, ""
	}
	prefix := string(uid) + "/" + vs.Name + "/"
	if !strings.HasPrefix(md.Id, prefix) {
		return nil, ""
	}
	return md, strings.TrimPrefix(md.Id, prefix)
}
