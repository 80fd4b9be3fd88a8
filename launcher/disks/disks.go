// Package disks creates the disk files a launcher owns: qcow2 overlays over read-only container
// disk images, blank disks, missing host disks, and NoCloud seed ISOs.
package disks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/go-logr/logr"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
)

// QemuImg is the qemu-img binary; tests and packagers may point it elsewhere.
var QemuImg = "qemu-img"

// Prepare creates every generated disk file of spec in l.DisksDir(), containerDisk overlays in
// l.OverlayDir(). If any step fails, the files created so far are removed, so a failed start
// leaves nothing half-made.
func Prepare(ctx context.Context, spec *launcherapi.VMSpec, l qemuargs.Layout, log logr.Logger) error {
	for _, dir := range []string{l.DisksDir(), l.OverlayDir()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create disks directory: %w", err)
		}
	}
	var created []string
	undo := func() {
		for _, p := range created {
			_ = os.Remove(p)
		}
	}
	for i, d := range spec.GetDisks() {
		img := l.DiskImage(d)
		made, err := prepareOne(ctx, d, img)
		if err != nil {
			undo()
			return fmt.Errorf("spec.disks[%d] (%s): %w", i, d.Name, err)
		}
		if made {
			created = append(created, img.Path)
			log.V(1).Info("disk prepared", "disk", d.Name, "path", img.Path)
		}
	}
	return nil
}

func prepareOne(ctx context.Context, d *launcherapi.Disk, img qemuargs.DiskImage) (bool, error) {
	switch src := d.Source.(type) {
	case *launcherapi.Disk_ContainerDisk:
		return true, overlay(ctx, src.ContainerDisk, img.Path)
	case *launcherapi.Disk_EmptyDisk:
		return true, createImage(ctx, img.Path, "qcow2", src.EmptyDisk.CapacityBytes)
	case *launcherapi.Disk_CloudInitNoCloud:
		return true, WriteNoCloudISO(img.Path, src.CloudInitNoCloud)
	case *launcherapi.Disk_File:
		return ensureFile(ctx, src.File)
	}
	return false, fmt.Errorf("disk has no source")
}

// overlay writes a qcow2 file whose backing file is the base image: the guest writes land in
// the overlay, and the base (shared by every VM using the image) is never opened for writing.
func overlay(ctx context.Context, src *launcherapi.ContainerDiskSource, path string) error {
	if _, err := os.Stat(src.BasePath); err != nil {
		return fmt.Errorf("container disk base image: %w", err)
	}
	_ = os.Remove(path)
	return qemuImg(ctx, "create", "-q", "-f", "qcow2", "-F", format(src.BaseFormat), "-b", src.BasePath, path)
}

// ensureFile leaves an existing file alone and creates a missing one only when asked to.
func ensureFile(ctx context.Context, src *launcherapi.FileSource) (bool, error) {
	fi, err := os.Stat(src.Path)
	switch {
	case err == nil && src.BlockDevice && fi.Mode()&os.ModeDevice == 0:
		return false, fmt.Errorf("%s is not a block device", src.Path)
	case err == nil:
		return false, nil
	case src.BlockDevice:
		return false, fmt.Errorf("block device %s: %w", src.Path, err)
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	case src.CreateBytes == 0:
		return false, fmt.Errorf("disk file %s does not exist", src.Path)
	}
	return true, createImage(ctx, src.Path, format(src.Format), src.CreateBytes)
}

func createImage(ctx context.Context, path, fmtName string, size uint64) error {
	_ = os.Remove(path)
	return qemuImg(ctx, "create", "-q", "-f", fmtName, path, fmt.Sprint(size))
}

func qemuImg(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, QemuImg, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img %s: %w: %s", args[0], err, out)
	}
	return nil
}

func format(f launcherapi.ImageFormat) string {
	if f == launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 {
		return "qcow2"
	}
	return "raw"
}
