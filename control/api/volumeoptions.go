package api

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// What an addvolume or removevolume body must hold, checked before anything is read, with
// KubeVirt's messages. The disk rules are those KubeVirt's webhooks apply to a hotplugged disk,
// plus the disk settings qvirt does not run: a request queued on a VM meets no webhook until
// the VM controller applies it, so it is judged here, when it can still be refused.

var serialRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// maxSerialLen is the webhook's limit on a disk serial.
const maxSerialLen = 256

// invalidf is a 422 Invalid whose message is the whole sentence, as a webhook denial reads.
func invalidf(format string, a ...any) error {
	return &statusError{http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(format, a...)}
}

// decodeAddVolume reads and checks an AddVolumeOptions; the disk takes the volume's name and
// the claim becomes hotpluggable, as in KubeVirt.
func decodeAddVolume(r *http.Request, prefix string) (*v1.AddVolumeOptions, error) {
	o := &v1.AddVolumeOptions{}
	if err := decodeBody(r, o); err != nil {
		return nil, err
	}
	switch {
	case o.Name == "":
		return nil, badRequest("AddVolumeOptions requires name to be set")
	case o.Disk == nil:
		return nil, badRequest("AddVolumeOptions requires disk to not be nil")
	case o.VolumeSource == nil:
		return nil, badRequest("AddVolumeOptions requires VolumeSource to not be nil")
	}
	if err := checkDryRun(o.DryRun); err != nil {
		return nil, err
	}
	src := o.VolumeSource
	switch {
	case src.PersistentVolumeClaim != nil && src.DataVolume != nil, src.PersistentVolumeClaim == nil && src.DataVolume == nil:
		return nil, badRequest("AddVolumeOptions requires exactly one volume source: persistentVolumeClaim or dataVolume")
	case src.DataVolume != nil:
		return nil, badRequest("qvirt does not support dataVolume volumes: DataVolumes need CDI, which this installation does not have; hotplug the claim itself with a persistentVolumeClaim source")
	case src.PersistentVolumeClaim.ClaimName == "":
		return nil, badRequest("AddVolumeOptions requires persistentVolumeClaim.claimName to be set")
	}
	// Volume names become QEMU ids and paths on the node.
	if msgs := k8svalidation.IsDNS1123Label(o.Name); len(msgs) > 0 {
		return nil, badRequest("AddVolumeOptions name %q is invalid: %s", o.Name, strings.Join(msgs, ", "))
	}
	o.Disk.Name = o.Name
	src.PersistentVolumeClaim.Hotpluggable = true
	if err := checkHotplugDisk(o.Disk, prefix); err != nil {
		return nil, err
	}
	return o, nil
}

// decodeRemoveVolume reads and checks a RemoveVolumeOptions.
func decodeRemoveVolume(r *http.Request) (*v1.RemoveVolumeOptions, error) {
	o := &v1.RemoveVolumeOptions{}
	if err := decodeBody(r, o); err != nil {
		return nil, err
	}
	if o.Name == "" {
		return nil, badRequest("RemoveVolumeOptions requires name to be set")
	}
	if err := checkDryRun(o.DryRun); err != nil {
		return nil, err
	}
	return o, nil
}

// checkDryRun accepts what the API server accepts for dryRun: nothing, or All.
func checkDryRun(v []string) error {
	for _, d := range v {
		if d != metav1.DryRunAll {
			return badRequest("unsupported dryRun value %q: only %q is supported", d, metav1.DryRunAll)
		}
	}
	return nil
}

// checkHotplugDisk follows KubeVirt's rules for a hotplugged disk (a disk or LUN on scsi, a
// disk on virtio) and refuses what qvirt does not run. prefix starts KubeVirt's messages:
// "Hotplug configuration" for a VMI, "AddVolume request" for a VM.
func checkHotplugDisk(d *v1.Disk, prefix string) error {
	name := d.Name
	switch {
	case d.Disk != nil && d.LUN == nil && d.CDRom == nil:
		if b := d.Disk.Bus; b != v1.DiskBusSCSI && b != v1.DiskBusVirtio {
			return invalidf("%s for disk [%s] requires bus to be 'scsi' or 'virtio'. [%s] is not permitted.", prefix, name, b)
		}
	case d.LUN != nil && d.Disk == nil && d.CDRom == nil:
		return invalidf("%s for LUN [%s]: qvirt does not support lun disks", prefix, name)
	default:
		return invalidf("%s for [%s] requires diskDevice of type 'disk' or 'lun' to be used.", prefix, name)
	}
	if d.Disk.PciAddress != "" {
		return invalidf("%s for [%s]: qvirt does not support PCI addresses for disks", prefix, name)
	}
	if d.BootOrder != nil && *d.BootOrder < 1 {
		return invalidf("%s for [%s] must have a boot order > 0, if supplied", prefix, name)
	}
	if d.Serial != "" {
		if !serialRE.MatchString(d.Serial) {
			return invalidf("%s for [%s]: the serial must be made up of the following characters [A-Za-z0-9_.+-], if specified", prefix, name)
		}
		if len([]rune(d.Serial)) > maxSerialLen {
			return invalidf("%s for [%s]: the serial must be less than or equal to %d in length, if specified", prefix, name, maxSerialLen)
		}
	}
	for _, f := range []struct {
		set  bool
		what string
	}{
		{d.DedicatedIOThread != nil && *d.DedicatedIOThread, "dedicated I/O threads"},
		{d.Cache != "", "disk cache modes"},
		{d.IO != "", "disk I/O modes"},
		{d.ErrorPolicy != nil, "disk error policies"},
		{d.Tag != "", "device tags"},
		{d.Shareable != nil && *d.Shareable, "shareable disks"},
	} {
		if f.set {
			return invalidf("%s for [%s]: qvirt does not support %s", prefix, name, f.what)
		}
	}
	return nil
}
