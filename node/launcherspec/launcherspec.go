// Package launcherspec turns a VirtualMachineInstance into the launcher's own VM spec. This is
// where Kubernetes' API stops: volumes become file paths and interfaces become tap descriptors,
// so the launcher never sees the CRD.
package launcherspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

const mib = 1 << 20

// ErrImageNotFound is returned by an ImageResolver for an image it cannot provide.
var ErrImageNotFound = errors.New("image not found")

// ImageResolver finds files inside container images (containerDisk, kernelBoot).
type ImageResolver interface {
	// File returns the host path of path inside image. An empty path asks for the image's
	// single disk file, as KubeVirt looks up containerDisk images.
	File(image, path string) (string, error)
}

// ImageOpener is an ImageResolver whose paths the node agent cannot open as they are (they name
// files in the launcher's container): Build reads image headers through it.
type ImageOpener interface {
	Open(path string) (*os.File, error)
}

// NIC is a pod-network interface the node agent has plumbed for the VM.
type NIC struct {
	// TapFDName is the name the tap descriptor is handed to the launcher under.
	TapFDName string
	// MAC the guest must use (from the spec, or chosen by the binding).
	MAC string
}

// Env is what the node contributes to a VM spec.
type Env struct {
	UseEmulation bool
	Images       ImageResolver
	// NICs by interface name; an interface without an entry is an error.
	NICs map[string]NIC
	// Claims are the VMI's persistentVolumeClaim disks in the launcher's container, by claim name.
	Claims map[string]ClaimDisk
	// SecretDirs is where each secret of the VMI's accessCredentials appears in the launcher's
	// container, by secret name.
	SecretDirs map[string]string
	// VSOCK is the VM's vhost-vsock device, which the node opened; nil: none.
	VSOCK *launcherapi.VSOCK
}

// noImages is the resolver of a launcher pod that mounts no image: every image is missing.
type noImages struct{}

func (noImages) File(image, _ string) (string, error) {
	return "", fmt.Errorf("%w: %s (the launcher pod mounts no image volume for it)", ErrImageNotFound, image)
}

// HotplugRootPorts is how many virtio disks a running q35 VM can take on.
const HotplugRootPorts = 4

// Build converts vmi. Errors name the VMI field that could not be honoured.
func Build(vmi *v1.VirtualMachineInstance, env Env) (*launcherapi.VMSpec, error) {
	if env.Images == nil {
		env.Images = noImages{}
	}
	spec := &vmi.Spec
	dom := &spec.Domain
	root := field.NewPath("spec", "domain")
	var errs field.ErrorList

	out := &launcherapi.VMSpec{
		Namespace: vmi.Namespace, Name: vmi.Name, Uid: string(vmi.UID),
		MachineType: machineType(dom),
		Accel:       launcherapi.Accel_ACCEL_KVM,
		Acpi:        dom.Features == nil || dom.Features.ACPI.Enabled == nil || *dom.Features.ACPI.Enabled,
		Devices: &launcherapi.Devices{
			SerialConsole: notFalse(dom.Devices.AutoattachSerialConsole),
			Vnc:           notFalse(dom.Devices.AutoattachGraphicsDevice),
			MemBalloon:    notFalse(dom.Devices.AutoattachMemBalloon),
			Rng:           dom.Devices.Rng != nil,
			// KubeVirt gives every VM the guest agent channel.
			GuestAgent: true,
			Vsock:      env.VSOCK,
		},
	}
	if env.UseEmulation {
		out.Accel = launcherapi.Accel_ACCEL_TCG
	}
	out.StartPaused = spec.StartStrategy != nil && *spec.StartStrategy == v1.StartStrategyPaused
	if !dom.Devices.DisableHotplug {
		out.Hotplug = &launcherapi.Hotplug{}
		if out.MachineType == "q35" {
			// On pc, virtio disks go onto the root bus.
			out.Hotplug.PcieRootPorts = HotplugRootPorts
		}
	}
	if c := dom.CPU; c != nil {
		out.Cpu = &launcherapi.CPU{Sockets: c.Sockets, Cores: c.Cores, Threads: c.Threads, Model: c.Model}
	}
	mem, err := GuestMemory(dom)
	if err != nil {
		errs = append(errs, field.Required(root.Child("memory", "guest"), err.Error()))
	}
	// QEMU sizes guest RAM in MiB; KubeVirt manifests often say 1G (10^9 bytes): round up.
	out.MemoryBytes = (mem + mib - 1) / mib * mib

	fw, ferrs := firmware(dom.Firmware, env, root.Child("firmware"))
	out.Firmware, errs = fw, append(errs, ferrs...)

	disks, derrs := disks(vmi, env)
	out.Disks, errs = disks, append(errs, derrs...)

	creds, cerrs := accessCredentials(spec, env)
	out.AccessCredentials, errs = creds, append(errs, cerrs...)

	for i, in := range dom.Devices.Interfaces {
		nic, ok := env.NICs[in.Name]
		if !ok {
			errs = append(errs, field.NotFound(root.Child("devices", "interfaces").Index(i).Child("name"), in.Name))
			continue
		}
		mac := in.MacAddress
		if mac == "" {
			mac = nic.MAC
		}
		out.Interfaces = append(out.Interfaces, &launcherapi.Interface{Name: in.Name, Model: "virtio", MacAddress: mac, TapFdName: nic.TapFDName, BootOrder: bootOrder(in.BootOrder)})
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return out, nil
}

func notFalse(b *bool) bool { return b == nil || *b }

func bootOrder(b *uint) uint32 {
	if b == nil {
		return 0
	}
	return uint32(*b)
}

// machineType maps KubeVirt's machine types onto the two QEMU families the launcher knows.
func machineType(dom *v1.DomainSpec) string {
	if dom.Machine == nil || dom.Machine.Type == "" {
		return "q35"
	}
	t := dom.Machine.Type
	switch {
	case t == "q35" || len(t) >= 7 && t[:7] == "pc-q35-":
		return "q35"
	case t == "pc" || len(t) >= 10 && t[:10] == "pc-i440fx-":
		return "pc"
	}
	return t // the launcher refuses it with a clear error
}

// GuestMemory is memory.guest, else the memory request, else the limit (the webhook normally
// filled guest already).
func GuestMemory(dom *v1.DomainSpec) (uint64, error) {
	if dom.Memory != nil && dom.Memory.Guest != nil {
		return uint64(dom.Memory.Guest.Value()), nil
	}
	for _, l := range []corev1.ResourceList{dom.Resources.Requests, dom.Resources.Limits} {
		if q, ok := l[corev1.ResourceMemory]; ok {
			return uint64(q.Value()), nil
		}
	}
	return 0, errors.New("the VM needs guest memory")
}

func firmware(fw *v1.Firmware, env Env, p *field.Path) (*launcherapi.Firmware, field.ErrorList) {
	if fw == nil {
		return nil, nil
	}
	out := &launcherapi.Firmware{Uuid: string(fw.UUID), Serial: fw.Serial}
	kb := fw.KernelBoot
	if kb == nil || kb.Container == nil {
		return out, nil
	}
	c := kb.Container
	out.KernelBoot = &launcherapi.KernelBoot{Cmdline: kb.KernelArgs}
	var errs field.ErrorList
	if c.KernelPath != "" {
		path, err := env.Images.File(c.Image, c.KernelPath)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("kernelBoot", "container", "kernelPath"), c.KernelPath, err.Error()))
		}
		out.KernelBoot.KernelPath = path
	}
	if c.InitrdPath != "" {
		path, err := env.Images.File(c.Image, c.InitrdPath)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("kernelBoot", "container", "initrdPath"), c.InitrdPath, err.Error()))
		}
		out.KernelBoot.InitrdPath = path
	}
	return out, errs
}

func disks(vmi *v1.VirtualMachineInstance, env Env) ([]*launcherapi.Disk, field.ErrorList) {
	var errs field.ErrorList
	volumes := map[string]int{}
	for i := range vmi.Spec.Volumes {
		volumes[vmi.Spec.Volumes[i].Name] = i
	}
	dp := field.NewPath("spec", "domain", "devices", "disks")
	var out []*launcherapi.Disk
	for i, d := range vmi.Spec.Domain.Devices.Disks {
		p := dp.Index(i)
		vi, ok := volumes[d.Name]
		if !ok {
			errs = append(errs, field.NotFound(p.Child("name"), d.Name))
			continue
		}
		if vmi.Spec.Volumes[vi].IsHotplugged() {
			// Attached once the VM runs, through HotplugDisks.
			continue
		}
		ld := diskDevice(d)
		if err := source(ld, &vmi.Spec.Volumes[vi], field.NewPath("spec", "volumes").Index(vi), vmi, env); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ld)
	}
	return out, errs
}

// diskDevice is how a disk shows to the guest; its source is filled in apart.
func diskDevice(d v1.Disk) *launcherapi.Disk {
	ld := &launcherapi.Disk{Name: d.Name, BootOrder: bootOrder(d.BootOrder), Serial: d.Serial}
	switch {
	case d.CDRom != nil:
		ld.Device = launcherapi.DiskDevice_DISK_DEVICE_CDROM
		ld.Bus = bus(d.CDRom.Bus)
		ld.ReadOnly = true
	case d.LUN != nil:
		ld.Bus, ld.ReadOnly = bus(d.LUN.Bus), d.LUN.ReadOnly
	case d.Disk != nil:
		ld.Bus, ld.ReadOnly = bus(d.Disk.Bus), d.Disk.ReadOnly
	default:
		ld.Bus = launcherapi.Bus_BUS_VIRTIO
	}
	return ld
}

func bus(b v1.DiskBus) launcherapi.Bus {
	switch b {
	case "virtio", "":
		return launcherapi.Bus_BUS_VIRTIO
	case "sata":
		return launcherapi.Bus_BUS_SATA
	case "scsi":
		return launcherapi.Bus_BUS_SCSI
	}
	return launcherapi.Bus(-1) // refused by the launcher with the field named
}

// source fills in where the disk's data comes from; an error names the volume's field.
func source(ld *launcherapi.Disk, vol *v1.Volume, vp *field.Path, vmi *v1.VirtualMachineInstance, env Env) *field.Error {
	if vol.ContainerDisk != nil {
		cd := vol.ContainerDisk
		path, err := env.Images.File(cd.Image, cd.Path)
		if errors.Is(err, ErrImageNotFound) {
			return field.Invalid(vp.Child("containerDisk", "image"), cd.Image, err.Error())
		}
		if err != nil {
			return field.Invalid(vp.Child("containerDisk", "path"), cd.Path, err.Error())
		}
		open := os.Open
		if o, ok := env.Images.(ImageOpener); ok {
			open = o.Open
		}
		format, err := imageFormat(open, path)
		if err != nil {
			return field.Invalid(vp.Child("containerDisk", "path"), cd.Path, err.Error())
		}
		ld.Source = &launcherapi.Disk_ContainerDisk{ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: path, BaseFormat: format}}
		return nil
	}
	if err := otherSource(ld, vol, vmi, env); err != nil {
		return field.Invalid(vp, vol.Name, err.Error())
	}
	return nil
}

func otherSource(ld *launcherapi.Disk, vol *v1.Volume, vmi *v1.VirtualMachineInstance, env Env) error {
	switch {
	case vol.CloudInitNoCloud != nil:
		ci := vol.CloudInitNoCloud
		user, err := pick(ci.UserData, ci.UserDataBase64)
		if err != nil {
			return fmt.Errorf("userDataBase64: %w", err)
		}
		network, err := pick(ci.NetworkData, ci.NetworkDataBase64)
		if err != nil {
			return fmt.Errorf("networkDataBase64: %w", err)
		}
		src := &launcherapi.CloudInitNoCloudSource{UserData: user, NetworkData: network, MetaData: metaData(vmi)}
		for _, s := range []struct {
			ref  *corev1.LocalObjectReference
			dir  *string
			name string
		}{{ci.UserDataSecretRef, &src.UserDataDir, "secretRef"}, {ci.NetworkDataSecretRef, &src.NetworkDataDir, "networkDataSecretRef"}} {
			if s.ref == nil || s.ref.Name == "" {
				continue
			}
			dir, ok := env.SecretDirs[s.ref.Name]
			if !ok {
				return fmt.Errorf("%s: the launcher pod mounts no volume of secret %q", s.name, s.ref.Name)
			}
			*s.dir = dir
		}
		ld.Source = &launcherapi.Disk_CloudInitNoCloud{CloudInitNoCloud: src}
	case vol.EmptyDisk != nil:
		ld.Source = &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: uint64(vol.EmptyDisk.Capacity.Value())}}
	case vol.HostDisk != nil:
		// A hostDisk is raw, as in KubeVirt: its format is never read from the file, which the
		// guest writes (a qcow2 header written there would otherwise name a backing file of
		// the guest's choosing at the next boot).
		fs := &launcherapi.FileSource{Path: vol.HostDisk.Path, Format: launcherapi.ImageFormat_IMAGE_FORMAT_RAW}
		if vol.HostDisk.Type == "DiskOrCreate" {
			fs.CreateBytes = uint64(vol.HostDisk.Capacity.Value())
		}
		ld.Source = &launcherapi.Disk_File{File: fs}
	case vol.PersistentVolumeClaim != nil:
		cd, ok := env.Claims[vol.PersistentVolumeClaim.ClaimName]
		if !ok {
			return fmt.Errorf("the launcher pod mounts no volume of claim %q", vol.PersistentVolumeClaim.ClaimName)
		}
		// A claim's disk.img is raw, as in KubeVirt, and for the hostDisk's reason: the guest
		// writes it, so its content never decides its format.
		ld.Source = &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: cd.Path, Format: launcherapi.ImageFormat_IMAGE_FORMAT_RAW,
			CreateBytes: cd.CreateBytes, BlockDevice: cd.Block}}
	default:
		return errors.New("this volume type is not supported by qvirt")
	}
	return nil
}

// metaData is the NoCloud meta-data KubeVirt writes, as JSON: the instance and the guest's
// hostname (the launcher adds the public keys of noCloud access credentials).
func metaData(vmi *v1.VirtualMachineInstance) string {
	host := vmi.Spec.Hostname
	if host == "" {
		host = vmi.Name
	}
	b, _ := json.Marshal(struct {
		InstanceID    string `json:"instance-id"`
		LocalHostname string `json:"local-hostname"`
	}{vmi.Name + "." + vmi.Namespace, host})
	return string(b) + "\n"
}

func pick(plain, b64 string) (string, error) {
	if plain != "" || b64 == "" {
		return plain, nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	return string(b), err
}

// imageFormat reads the qcow2 magic of a containerDisk's file; anything else is used raw. Only
// read-only image files are looked at this way (the guest writes to an overlay), never a file
// the guest writes.
func imageFormat(open func(string) (*os.File, error), path string) (launcherapi.ImageFormat, error) {
	f, err := open(path)
	if err != nil {
		return launcherapi.ImageFormat_IMAGE_FORMAT_RAW, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err == nil && string(magic) == "QFI\xfb" {
		return launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2, nil
	}
	return launcherapi.ImageFormat_IMAGE_FORMAT_RAW, nil
}
