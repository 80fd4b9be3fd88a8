package qmp

import (
	"context"
	"fmt"
	"os"
)

// GetFD passes f to QEMU under fdname (getfd), for later use by name, e.g.
// netdev_add with "fd": fdname. f stays open on our side.
func (c *Client) GetFD(ctx context.Context, fdname string, f *os.File) error {
	return c.ExecuteWithFile(ctx, "getfd", map[string]any{"fdname": fdname}, f, nil)
}

// CloseFD closes a descriptor passed with GetFD (closefd).
func (c *Client) CloseFD(ctx context.Context, fdname string) error {
	return c.Execute(ctx, "closefd", map[string]any{"fdname": fdname}, nil)
}

// NetdevAdd adds a network backend; args are netdev_add's arguments, e.g.
// {"type": "tap", "id": "net0", "fd": "tap0"}.
func (c *Client) NetdevAdd(ctx context.Context, args map[string]any) error {
	return c.Execute(ctx, "netdev_add", args, nil)
}

// NetdevDel removes a network backend by id.
func (c *Client) NetdevDel(ctx context.Context, id string) error {
	return c.Execute(ctx, "netdev_del", map[string]any{"id": id}, nil)
}

// DeviceAdd hot-plugs a device; args are device_add's arguments, e.g.
// {"driver": "virtio-net-pci", "id": "nic0", "netdev": "net0"}.
func (c *Client) DeviceAdd(ctx context.Context, args map[string]any) error {
	return c.Execute(ctx, "device_add", args, nil)
}

// DeviceDel asks for a device to be unplugged. It returns once QEMU accepted
// the request; the device is gone when QEMU emits DEVICE_DELETED with this
// id, which for PCI devices needs the guest's cooperation. A missing device
// is an *Error of class ClassDeviceNotFound.
func (c *Client) DeviceDel(ctx context.Context, id string) error {
	return c.Execute(ctx, "device_del", map[string]any{"id": id}, nil)
}

// Screendump formats.
const (
	ScreendumpPPM = "ppm"
	ScreendumpPNG = "png"
)

// Screendump writes the primary console to filename, a path QEMU opens. An
// empty format picks PNG on QEMU 7.1 and later, where screendump accepts a
// format, and PPM before. QEMU needs a display device (e.g. -device VGA) to
// have a console.
func (c *Client) Screendump(ctx context.Context, filename string, format string) error {
	if format == "" && c.versionAtLeast(7, 1) {
		format = ScreendumpPNG
	}
	args := map[string]any{"filename": filename}
	if format != "" {
		args["format"] = format
	}
	return c.Execute(ctx, "screendump", args, nil)
}

func (c *Client) versionAtLeast(major, minor int) bool {
	gotMajor, gotMinor, _ := c.Version()
	return gotMajor > major || (gotMajor == major && gotMinor >= minor)
}

// FDInfo is what add-fd answers: the descriptor set the file went into, and
// QEMU's descriptor number for it.
type FDInfo struct {
	FDSetID int64 `json:"fdset-id"`
	FD      int64 `json:"fd"`
}

// AddFD passes f to QEMU into a new descriptor set (add-fd). QEMU code that
// opens "/dev/fdset/<FDSetID>" gets a duplicate of it, with the access mode f
// was opened with: a read-only open needs a read-only descriptor. opaque is
// a free-form label query-fdsets shows. f stays open on our side.
func (c *Client) AddFD(ctx context.Context, f *os.File, opaque string) (FDInfo, error) {
	var args map[string]any
	if opaque != "" {
		args = map[string]any{"opaque": opaque}
	}
	var info FDInfo
	err := c.ExecuteWithFile(ctx, "add-fd", args, f, &info)
	return info, err
}

// RemoveFD removes a descriptor set (remove-fd). QEMU closes its descriptors
// once nothing opened through /dev/fdset/<id> holds them any more, so remove
// the set after the block nodes using it.
func (c *Client) RemoveFD(ctx context.Context, fdsetID int64) error {
	return c.Execute(ctx, "remove-fd", map[string]any{"fdset-id": fdsetID}, nil)
}

// DeviceDelWait unplugs a device and waits until QEMU emits DEVICE_DELETED
// for it, or ctx ends (an error wrapping ErrTimeout on a deadline). A SCSI
// disk goes at once; a PCI device waits for the guest to release it, which
// a guest without a driver for the slot never does, so bound ctx. A missing
// device is an *Error of class ClassDeviceNotFound.
func (c *Client) DeviceDelWait(ctx context.Context, id string) error {
	// Subscribed before the command: a SCSI disk's event may come before the reply.
	events, cancel := c.Subscribe(64)
	defer cancel()
	if err := c.DeviceDel(ctx, id); err != nil {
		return err
	}
	if _, err := WaitEvent(ctx, events, DeviceDeleted(id)); err != nil {
		return fmt.Errorf("qmp device_del %s: %w", id, err)
	}
	return nil
}

// DeviceDeleted matches the DEVICE_DELETED event of the device with this id
// (not those QEMU sends for the device's unnamed children).
func DeviceDeleted(id string) func(Event) bool {
	return func(e Event) bool {
		return e.Name == "DEVICE_DELETED" && e.Data["device"] == id
	}
}

// ObjectProperty is an entry of qom-list.
type ObjectProperty struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// QOMList lists the properties (and children, as "child<type>") of the QOM
// object at path; a missing object is an *Error of class ClassDeviceNotFound.
func (c *Client) QOMList(ctx context.Context, path string) ([]ObjectProperty, error) {
	var props []ObjectProperty
	err := c.Execute(ctx, "qom-list", map[string]any{"path": path}, &props)
	return props, err
}
