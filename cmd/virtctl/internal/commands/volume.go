package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// addvolume and removevolume as KubeVirt's virtctl up to v1.7: the request goes to the VMI,
// whose spec alone changes, or with --persist to the VM, which keeps the change in its template
// and has its controller apply it to the VMI. (KubeVirt v1.8 made --persist a no-op and always
// asks the VM first.)

// concurrentError is the API server's answer to a patch whose test found the object changed;
// virt-api passes it on and the request is tried again.
const (
	concurrentError = "the server rejected our request due to an error in our request"
	maxRetries      = 15
)

const persistUsage = "if set, the added volume will be persisted in the VM spec (if it exists)"

// hotplugFlags are addvolume's.
type hotplugFlags struct {
	volumeName, diskName, serial, cache, diskType, bus string
	persist, dryRun                                    bool
}

func newAddVolumeCommand(e *env) *cobra.Command {
	var f hotplugFlags
	cmd := &cobra.Command{
		Use:   "addvolume VMI",
		Short: "add a volume to a running VM",
		Example: `  #Dynamically attach a volume to a running VM giving it a serial number to identify the volume inside the guest.
  virtctl addvolume fedora-vm --volume-name=example-pvc --serial=1234567890

  #Dynamically attach a volume to a running VM giving it an explicit disk name to be used in the disk/volume section of the VM spec.
  virtctl addvolume fedora-vm --volume-name=example-pvc --disk-name=example-disk

  #Dynamically attach a volume to a running VM and persisting it in the VM spec. At next VM restart the volume will be attached like any other volume.
  virtctl addvolume fedora-vm --volume-name=example-pvc --persist

  #Dynamically attach a volume to a running VM on the virtio bus.
  virtctl addvolume fedora-vm --volume-name=example-pvc --bus=virtio`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return addVolume(cmd, e, args[0], &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.volumeName, "volume-name", "", "name of the volume source, either DV or PVC")
	_ = cmd.MarkFlagRequired("volume-name")
	fl.StringVar(&f.diskName, "disk-name", "", "name used in the disk/volume section of spec")
	fl.StringVar(&f.serial, "serial", "", "serial number you want to assign to the disk")
	fl.StringVar(&f.cache, "cache", "", "caching options attribute control the cache mechanism")
	fl.BoolVar(&f.persist, "persist", false, persistUsage)
	fl.BoolVar(&f.dryRun, "dry-run", false, dryRunUsage)
	fl.StringVar(&f.diskType, "disk-type", "disk", "specifies disk type to be hotplugged (disk/lun). Disk by default.")
	fl.StringVar(&f.bus, "bus", string(v1.DiskBusSCSI), fmt.Sprintf("specifies disk bus. %s by default.", v1.DiskBusSCSI))
	return cmd
}

// hotplugRequest builds the body from the flags, with KubeVirt's checks and messages; the
// server has the last word on what qvirt runs (no LUNs, no cache modes).
func (f *hotplugFlags) hotplugRequest() (*kvclient.AddVolumeOptions, error) {
	name := f.volumeName
	if f.diskName != "" {
		name = f.diskName
	}
	if len(name) > validation.DNS1035LabelMaxLength {
		if f.diskName != "" {
			return nil, fmt.Errorf("Invalid disk name %s, must not exceed %d characters", f.diskName, validation.DNS1035LabelMaxLength)
		}
		return nil, fmt.Errorf("Invalid volume name %s, must not exceed %d characters. Use in conjunction with --disk-name to specify a shorter name", f.volumeName, validation.DNS1035LabelMaxLength)
	}
	disk := &v1.Disk{Serial: name}
	if f.serial != "" {
		disk.Serial = f.serial
	}
	bus := v1.DiskBus(f.bus)
	switch f.diskType {
	case "disk":
		if bus != v1.DiskBusSCSI && bus != v1.DiskBusVirtio {
			return nil, fmt.Errorf("Invalid bus type '%s' for disk. Only '%s' and '%s' are supported.", f.bus, v1.DiskBusSCSI, v1.DiskBusVirtio)
		}
		disk.Disk = &v1.DiskTarget{Bus: bus}
	case "lun":
		if bus != v1.DiskBusSCSI {
			return nil, fmt.Errorf("Invalid bus type '%s' for LUN disk. Only '%s' bus is supported.", f.bus, v1.DiskBusSCSI)
		}
		disk.LUN = &v1.LunTarget{Bus: bus}
	default:
		return nil, fmt.Errorf("Invalid disk type '%s'. Only LUN and Disk are supported.", f.diskType)
	}
	if f.cache != "" {
		disk.Cache = v1.DriverCache(f.cache)
		if disk.Cache != v1.CacheNone && disk.Cache != v1.CacheWriteThrough && disk.Cache != v1.CacheWriteBack {
			return nil, fmt.Errorf("error adding volume, invalid cache value %s", f.cache)
		}
	}
	return &kvclient.AddVolumeOptions{
		Name: name,
		Disk: disk,
		VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: f.volumeName},
			Hotpluggable:                      true,
		}},
		DryRun: kvclient.DryRun(f.dryRun),
	}, nil
}

func addVolume(cmd *cobra.Command, e *env, vmName string, f *hotplugFlags) error {
	body, err := f.hotplugRequest()
	if err != nil {
		return err
	}
	c, ns, err := e.client()
	if err != nil {
		return err
	}
	// KubeVirt's virtctl looks for a DataVolume first; qvirt has no CDI, so only claims.
	if _, err := c.PersistentVolumeClaim(cmd.Context(), ns, f.volumeName); err != nil {
		return fmt.Errorf("error adding volume, Volume %s is not a DataVolume or PersistentVolumeClaim", f.volumeName)
	}
	err = putVolumeRequest(cmd.Context(), c, ns, vmName, "addvolume", f.persist, body)
	if errors.Is(err, errRetriesExhausted) {
		return fmt.Errorf("error adding volume after %d retries", maxRetries)
	}
	if err != nil {
		return fmt.Errorf("error adding volume, %v", err)
	}
	fmt.Fprintf(out(cmd), "Successfully submitted add volume request to VM %s for volume %s\n", vmName, f.volumeName)
	return nil
}

func newRemoveVolumeCommand(e *env) *cobra.Command {
	var (
		volumeName      string
		persist, dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "removevolume VMI",
		Short: "remove a volume from a running VM",
		Example: `  #Remove volume dynamically attached to a running VM.
  virtctl removevolume fedora-vm --volume-name=example-pvc

  #Remove volume dynamically attached to a running VM and persisting it in the VM spec.
  virtctl removevolume fedora-vm --volume-name=example-pvc --persist`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			body := &kvclient.RemoveVolumeOptions{Name: volumeName, DryRun: kvclient.DryRun(dryRun)}
			err = putVolumeRequest(cmd.Context(), c, ns, args[0], "removevolume", persist, body)
			if errors.Is(err, errRetriesExhausted) {
				return fmt.Errorf("error removing volume after %d retries", maxRetries)
			}
			if err != nil {
				return fmt.Errorf("error removing volume, %v", err)
			}
			fmt.Fprintf(out(cmd), "Successfully submitted remove volume request to VM %s for volume %s\n", args[0], volumeName)
			return nil
		},
	}
	cmd.Flags().StringVar(&volumeName, "volume-name", "", "name used in volumes section of spec")
	_ = cmd.MarkFlagRequired("volume-name")
	cmd.Flags().BoolVar(&persist, "persist", false, persistUsage)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, dryRunUsage)
	return cmd
}

var errRetriesExhausted = errors.New("retries exhausted")

// putVolumeRequest sends the request to the VMI of that name, or with persist to the VM, and
// tries again while the server finds the object changed under it.
func putVolumeRequest(ctx context.Context, c *kvclient.Client, ns, name, subresource string, persist bool, body any) error {
	resource := kvclient.VirtualMachineInstances
	if persist {
		resource = kvclient.VirtualMachines
	}
	for retry := 1; retry <= maxRetries; retry++ {
		err := c.Put(ctx, ns, resource, name, subresource, body)
		if err == nil || err.Error() != concurrentError {
			return err
		}
		if retry < maxRetries {
			time.Sleep(time.Duration(retry*rand.IntN(5)) * time.Millisecond)
		}
	}
	return errRetriesExhausted
}
