package qmp

import (
	"context"
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
