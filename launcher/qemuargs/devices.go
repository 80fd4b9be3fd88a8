package qemuargs

import (
	"fmt"
	"strings"
)

// Each device renders its own arguments; Build assembles them in a fixed order.

// opts renders QEMU's comma-separated key=value list; commas in values are doubled as QEMU expects.
func opts(head string, kv ...string) string {
	var b strings.Builder
	b.WriteString(head)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(kv[i+1], ",", ",,"))
	}
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// socketChardev is a listening unix socket that QEMU serves; wait=off so QEMU never blocks on a client.
type socketChardev struct {
	ID, Path, LogFile string
}

func (c socketChardev) args() []string {
	return []string{"-chardev", opts("socket", "id", c.ID, "path", c.Path, "server", "on", "wait", "off", "logfile", c.LogFile, "logappend", logAppend(c.LogFile))}
}

func logAppend(logFile string) string {
	if logFile == "" {
		return ""
	}
	return "on"
}

// blockDevice is a -blockdev pair (protocol node and format node) plus the guest-visible device.
type blockDevice struct {
	Index     int
	Name      string
	Path      string
	Block     bool   // Path is a block device
	Format    string // raw or qcow2
	ReadOnly  bool
	Driver    string // virtio-blk-pci, ide-hd, ide-cd, scsi-hd, scsi-cd
	Bus       string // controller bus for ide/scsi devices
	LUN       string // scsi only
	BootIndex uint32
	Serial    string
}

// FormatNode is the node name QEMU reports in query-blockstats for this disk; node names
// are limited to 31 characters, so they are derived from the index, not the disk name.
func FormatNode(index int) string { return fmt.Sprintf("fmt-%d", index) }

func (d blockDevice) args() []string {
	file := fmt.Sprintf("file-%d", d.Index)
	ro := onOff(d.ReadOnly)
	dev := opts(d.Driver, "bus", d.Bus, "lun", d.LUN, "drive", FormatNode(d.Index), "id", "ua-"+d.Name, "serial", d.Serial)
	if d.BootIndex > 0 {
		dev += fmt.Sprintf(",bootindex=%d", d.BootIndex)
	}
	proto := "file"
	if d.Block {
		proto = "host_device"
	}
	return []string{
		"-blockdev", opts("", "driver", proto, "filename", d.Path, "node-name", file, "read-only", ro),
		"-blockdev", opts("", "driver", d.Format, "file", file, "node-name", FormatNode(d.Index), "read-only", ro),
		"-device", dev,
	}
}

// tapNIC is a virtio-net device on a tap descriptor inherited from the launcher.
type tapNIC struct {
	Index     int
	Name      string
	FD        int
	MAC       string
	BootIndex uint32
}

func (n tapNIC) args() []string {
	id := fmt.Sprintf("hostnet%d", n.Index)
	// romfile= : no option ROM, we never network-boot and the ROM files may be absent.
	dev := opts("virtio-net-pci", "netdev", id, "id", "ua-"+n.Name, "mac", n.MAC) + ",romfile="
	if n.BootIndex > 0 {
		dev += fmt.Sprintf(",bootindex=%d", n.BootIndex)
	}
	return []string{"-netdev", opts("tap", "id", id, "fd", fmt.Sprint(n.FD)), "-device", dev}
}
