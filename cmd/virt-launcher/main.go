// virt-launcher runs one VM: it starts QEMU directly and manages it over QMP, serving the
// launcher API on a unix socket in the per-VM directory.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/klog/v2"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/hotplugvol"

	"github.com/qvirt/qvirt/launcher/server"
)

func main() {
	var opts server.RunOptions
	klog.InitFlags(nil)
	flag.StringVar(&opts.Dir, "dir", "", "per-VM directory shared with the node agent (sockets, disks, logs)")
	flag.StringVar(&opts.EphemeralDir, "ephemeral-dir", "", "directory for the containerDisk overlays, the pod's own writable space (default: disks/ in --dir)")
	flag.StringVar(&opts.QEMUBinary, "qemu", "qemu-system-x86_64", "QEMU binary")
	flag.DurationVar(&opts.StopGrace, "stop-grace-period", 30*time.Second, "time the guest gets to power off when the launcher is terminated")
	flag.DurationVar(&opts.Linger, "linger", 5*time.Second, "how long the API stays up after QEMU exits")
	name := flag.String("vmi", "", "namespace/name of the VMI, for logs")
	specFile := flag.String("spec", "", "start the VM described by this JSON VMSpec at once, without waiting for the node agent")
	hotplugSocket := flag.String("serve-hotplug-volume", "", "instead of running a VM, serve the hotplugged volume at --hotplug-volume-path on this socket (an attachment pod)")
	hotplugPath := flag.String("hotplug-volume-path", "", "the hotplugged claim: its mount directory, or its block device")
	flag.Parse()
	if *hotplugSocket != "" {
		os.Exit(serveHotplugVolume(*hotplugSocket, *hotplugPath, *name))
	}
	if opts.Dir == "" {
		klog.ErrorS(nil, "--dir is required")
		os.Exit(2)
	}
	opts.Log = klog.Background().WithValues("vmi", *name)
	if *specFile != "" {
		spec, err := readSpec(*specFile)
		if err != nil {
			klog.ErrorS(err, "reading --spec", "file", *specFile)
			os.Exit(2)
		}
		opts.Spec = spec
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := server.Run(ctx, opts); err != nil {
		klog.ErrorS(err, "launcher failed", "vmi", *name)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// serveHotplugVolume runs an attachment pod until it is terminated.
func serveHotplugVolume(socket, volume, vmi string) int {
	log := klog.Background().WithValues("vmi", vmi, "volume", volume)
	if volume == "" {
		log.Error(nil, "--hotplug-volume-path is required")
		return 2
	}
	l, err := hotplugvol.Listen(socket)
	if err != nil {
		log.Error(err, "listening for the node agent")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	log.Info("serving the hotplugged volume", "socket", socket)
	if err := hotplugvol.Serve(l, hotplugvol.Volume{Path: volume}, log); err != nil {
		log.Error(err, "serving the hotplugged volume")
		return 1
	}
	return 0
}

func readSpec(path string) (*launcherapi.VMSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	spec := &launcherapi.VMSpec{}
	if err := protojson.Unmarshal(b, spec); err != nil {
		return nil, err
	}
	return spec, nil
}
