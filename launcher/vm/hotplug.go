package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation/field"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/qmp"
)

var (
	// ErrNoDescriptor: a disk names a descriptor that was not handed in (or was used already).
	ErrNoDescriptor = errors.New("vm: no descriptor handed in under that name")
	// ErrHotplugged is returned by Migrate while disks are hotplugged: the target would start
	// without them.
	ErrHotplugged = errors.New("vm: hotplugged disks do not migrate")
)

// defaultDetachTimeout bounds the wait for the guest to release a disk being detached. A SCSI
// disk goes at once; a virtio disk goes when the guest acknowledges the unplug, which a guest
// without a driver for the slot never does.
const defaultDetachTimeout = 60 * time.Second

// TakeFD hands over the descriptor handed in under name; the caller of HotplugDisks keeps it
// no more. false means there is none.
type TakeFD func(name string) (*os.File, bool)

// hotplugDisk is a disk attached while the VM runs, and what QEMU holds for it.
type hotplugDisk struct {
	name, target string
	bus          launcherapi.Bus
	device       string // QEMU device id
	fileNode     string // protocol node on /dev/fdset/<fdset>
	formatNode   string
	fdset        int64
	port         string // root port of a virtio disk on q35
	lun          int    // of a SCSI disk
	// detaching: device_del was sent and the guest has not released the device yet.
	detaching bool
}

// hotplugState is the VM's hotplugged disks. mu serialises the changes, which may wait long
// for a guest, so it is not VM.mu; the status carries a copy (publishHotplugLocked).
type hotplugState struct {
	mu    sync.Mutex
	disks []*hotplugDisk
	// seq numbers the block nodes: node names are limited to 31 characters, disk names are not.
	seq int
}

// HotplugDisks makes the running VM's hotplugged disks exactly disks: it detaches those not
// listed, then attaches those it lacks, taking their descriptors with take. Every disk is
// tried, an invalid one refused on its own; the error joins the failures, and the status lists
// what QEMU has now.
func (v *VM) HotplugDisks(ctx context.Context, disks []*launcherapi.Disk, take TakeFD) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	spec := v.Spec()
	if len(disks) > 0 && spec.GetHotplug() == nil {
		return fmt.Errorf("%w: the VM was started without room for hotplugged disks (spec.hotplug)", ErrInvalidSpec)
	}
	v.mu.Lock()
	state, m := v.status.State, v.status.Migration
	v.mu.Unlock()
	switch {
	case state != launcherapi.State_STATE_RUNNING && state != launcherapi.State_STATE_PAUSED:
		return fmt.Errorf("%w: the VM is %s", ErrNotRunning, state)
	case migrating(m):
		return ErrMigrating
	}

	v.hp.mu.Lock()
	defer v.hp.mu.Unlock()
	defer v.publishHotplug()
	listed := make(map[string]bool, len(disks))
	for _, d := range disks {
		listed[d.Name] = true
	}
	var gone []*hotplugDisk
	for _, d := range v.hp.disks {
		if !listed[d.name] {
			gone = append(gone, d)
		}
	}
	// Detaching first frees LUNs, ports and names for the disks to come.
	errs := v.detachAll(ctx, mon, gone)
	// A disk that cannot be attached is refused alone: it does not hold up the others.
	invalid := qemuargs.ValidateHotplugDisks(spec, disks, field.NewPath("disks"))
	for i, d := range disks {
		if len(invalid[i]) > 0 {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidSpec, invalid[i].ToAggregate()))
			continue
		}
		if have := v.hp.find(d.Name); have != nil {
			if have.detaching {
				errs = append(errs, fmt.Errorf("disk %s: still being detached; the guest has not released it", d.Name))
			}
			continue
		}
		if err := v.attach(ctx, mon, spec, d, take); err != nil {
			errs = append(errs, fmt.Errorf("disk %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (h *hotplugState) find(name string) *hotplugDisk {
	for _, d := range h.disks {
		if d.name == name {
			return d
		}
	}
	return nil
}

func (h *hotplugState) remove(gone *hotplugDisk) {
	for i, d := range h.disks {
		if d == gone {
			h.disks = append(h.disks[:i], h.disks[i+1:]...)
			return
		}
	}
}

// attach gives QEMU the disk's descriptor in an fdset of its own, opens it through a protocol
// and a format node, and plugs the guest's device onto them. A failure undoes what it made.
func (v *VM) attach(ctx context.Context, mon *qmp.Client, spec *launcherapi.VMSpec, d *launcherapi.Disk, take TakeFD) error {
	src := d.GetFd()
	f, ok := take(src.FdName)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoDescriptor, src.FdName)
	}
	// QEMU gets its own copy; this one goes whatever happens.
	defer f.Close()
	if d.ReadOnly {
		// QEMU opens a read-only node with a read-only descriptor of the set only.
		ro, err := reopenReadOnly(f)
		if err != nil {
			return err
		}
		defer ro.Close()
		f = ro
	}
	hd, err := v.placeDisk(spec, d)
	if err != nil {
		return err
	}
	log := v.log.WithValues("disk", d.Name, "target", hd.target)

	var undo []func(context.Context) error
	rollback := func(cause error) error {
		// The request's context may be what ended; the cleanup gets its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.cfg.QuitTimeout)
		defer cancel()
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](rctx); err != nil {
				log.Error(err, "undoing a failed disk attach")
			}
		}
		return cause
	}
	info, err := mon.AddFD(ctx, f, "disk "+d.Name)
	if err != nil {
		return err
	}
	hd.fdset = info.FDSetID
	undo = append(undo, func(ctx context.Context) error { return mon.RemoveFD(ctx, hd.fdset) })

	proto := "file"
	if src.BlockDevice {
		proto = "host_device"
	}
	// As cold-plugged disks: QEMU's defaults but read-only, and never a backing file a qcow2
	// header names.
	if err := mon.BlockdevAdd(ctx, map[string]any{"driver": proto, "node-name": hd.fileNode,
		"filename": fmt.Sprintf("/dev/fdset/%d", hd.fdset), "read-only": d.ReadOnly}); err != nil {
		return rollback(err)
	}
	undo = append(undo, func(ctx context.Context) error { return mon.BlockdevDel(ctx, hd.fileNode) })
	format := map[string]any{"driver": "raw", "node-name": hd.formatNode, "file": hd.fileNode, "read-only": d.ReadOnly}
	if src.Format == launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 {
		format["driver"], format["backing"] = "qcow2", nil
	}
	if err := mon.BlockdevAdd(ctx, format); err != nil {
		return rollback(err)
	}
	undo = append(undo, func(ctx context.Context) error { return mon.BlockdevDel(ctx, hd.formatNode) })

	dev := map[string]any{"id": hd.device, "drive": hd.formatNode}
	if d.Serial != "" {
		dev["serial"] = d.Serial
	}
	if hd.bus == launcherapi.Bus_BUS_SCSI {
		dev["driver"], dev["bus"], dev["scsi-id"], dev["lun"] = "scsi-hd", qemuargs.SCSIBus, 0, hd.lun
	} else {
		dev["driver"], dev["bus"] = "virtio-blk-pci", hd.port
	}
	if err := mon.DeviceAdd(ctx, dev); err != nil {
		return rollback(err)
	}
	v.hp.disks = append(v.hp.disks, hd)
	log.Info("disk hotplugged", "device", hd.device, "bus", dev["bus"])
	return nil
}

// placeDisk picks the QEMU names and the place of a new disk: its target, a free LUN or root
// port, its block nodes.
func (v *VM) placeDisk(spec *launcherapi.VMSpec, d *launcherapi.Disk) (*hotplugDisk, error) {
	hd := &hotplugDisk{name: d.Name, bus: d.Bus, device: "ua-" + d.Name}
	used := map[string]bool{}
	for _, t := range coldTargets(spec.Disks) {
		used[t] = true
	}
	luns, ports := map[int]bool{}, map[string]bool{}
	// Cold-plugged SCSI disks hold LUNs 0, 1, ... in their order (qemuargs).
	for _, c := range spec.Disks {
		if c.Bus == launcherapi.Bus_BUS_SCSI {
			luns[len(luns)] = true
		}
	}
	for _, h := range v.hp.disks {
		used[h.target] = true
		if h.bus == launcherapi.Bus_BUS_SCSI {
			luns[h.lun] = true
		} else {
			ports[h.port] = true
		}
	}
	hd.target = freeTarget(d.Bus, used)
	switch {
	case d.Bus == launcherapi.Bus_BUS_SCSI:
		for luns[hd.lun] {
			hd.lun++
		}
	case spec.MachineType == "pc":
		hd.port = qemuargs.PCRootBus
	default:
		for i := 0; i < qemuargs.HotplugPorts(spec); i++ {
			if p := qemuargs.HotplugPort(i); !ports[p] {
				hd.port = p
				break
			}
		}
		if hd.port == "" {
			return nil, fmt.Errorf("no free PCIe root port for a virtio disk (the VM has %d, spec.hotplug.pcie_root_ports)", qemuargs.HotplugPorts(spec))
		}
	}
	v.hp.seq++
	hd.fileNode, hd.formatNode = fmt.Sprintf("hp-file-%d", v.hp.seq), fmt.Sprintf("hp-fmt-%d", v.hp.seq)
	return hd, nil
}

// reopenReadOnly opens f's file anew, read-only.
func reopenReadOnly(f *os.File) (*os.File, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening the descriptor read-only: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// detachAll unplugs the disks at once and waits for the guest to release each, then closes
// what QEMU held for them. A disk the guest keeps stays listed, detaching; a later
// DEVICE_DELETED or HotplugDisks finishes it.
func (v *VM) detachAll(ctx context.Context, mon *qmp.Client, disks []*hotplugDisk) []error {
	if len(disks) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, v.cfg.DetachTimeout)
	defer cancel()
	errs := make([]error, len(disks))
	var wg sync.WaitGroup
	for i, d := range disks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = v.unplug(wctx, mon, d)
		}()
	}
	wg.Wait()
	for i, d := range disks {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("disk %s: %w", d.name, errs[i])
			continue
		}
		if err := v.release(ctx, mon, d); err != nil {
			errs[i] = fmt.Errorf("disk %s: %w", d.name, err)
		}
	}
	return errs
}

// unplug removes the guest's device and waits until QEMU has.
func (v *VM) unplug(ctx context.Context, mon *qmp.Client, d *hotplugDisk) error {
	log := v.log.WithValues("disk", d.name, "device", d.device)
	if d.detaching {
		// Asked before: the guest may have released it since (or ask again below).
		if _, err := mon.QOMList(ctx, "/machine/peripheral/"+d.device); qmp.HasClass(err, qmp.ClassDeviceNotFound) {
			return nil
		}
	}
	d.detaching = true
	err := mon.DeviceDelWait(ctx, d.device)
	switch {
	case err == nil, qmp.HasClass(err, qmp.ClassDeviceNotFound):
		log.Info("disk unplugged")
		return nil
	case errors.Is(err, qmp.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
		log.Info("the guest has not released the disk", "waited", v.cfg.DetachTimeout)
		return fmt.Errorf("the guest did not release it within %v (a virtio disk needs the guest's acknowledgement): %w", v.cfg.DetachTimeout, err)
	}
	return err
}

// release closes the block nodes and the fdset of a disk whose device is gone, and forgets it.
func (v *VM) release(ctx context.Context, mon *qmp.Client, d *hotplugDisk) error {
	var errs []error
	for _, n := range []string{d.formatNode, d.fileNode} {
		if err := mon.BlockdevDel(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := mon.RemoveFD(ctx, d.fdset); err != nil {
		errs = append(errs, err)
	}
	v.hp.remove(d)
	if err := errors.Join(errs...); err != nil {
		v.log.Error(err, "closing a detached disk's nodes", "disk", d.name)
		return err
	}
	v.log.Info("disk detached", "disk", d.name, "target", d.target)
	return nil
}

// hotplugDeviceDeleted finishes a detach the guest completed after HotplugDisks stopped
// waiting for it.
func (v *VM) hotplugDeviceDeleted(device string) {
	go func() {
		v.hp.mu.Lock()
		defer v.hp.mu.Unlock()
		var d *hotplugDisk
		for _, h := range v.hp.disks {
			if h.device == device && h.detaching {
				d = h
			}
		}
		mon, err := v.live()
		if d == nil || err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		defer cancel()
		_ = v.release(ctx, mon, d)
		v.publishHotplug()
	}()
}

// publishHotplug copies the hotplugged disks into the status; v.hp.mu is held.
func (v *VM) publishHotplug() {
	list := make([]*launcherapi.HotpluggedDisk, 0, len(v.hp.disks))
	nodes := make(map[string]string, len(v.hp.disks))
	for _, d := range v.hp.disks {
		list = append(list, &launcherapi.HotpluggedDisk{Name: d.name, Target: d.target})
		nodes[d.formatNode] = d.name
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if isFinal(v.status.State) {
		return
	}
	v.status.HotpluggedDisks = list
	v.hotplugNodes = nodes
}
