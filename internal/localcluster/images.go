package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/qvirt/qvirt/internal/localcluster/ociimages"
)

// Image names, as deploy/ and the example VMs refer to them. Component images are pulled as
// docker.io/qvirt/<name>, which the nodes' containerd resolves at the local registry.
const (
	ComponentTag = "v0.1.0"
	PauseImage   = "qvirt/pause:3.10"
	// TinyKernelImage and TinyDiskImage are the test guest, pulled as localhost:5000/<name>.
	TinyKernelImage = "qvirt/tiny-kernel:latest"
	TinyDiskImage   = "qvirt/tiny-disk:latest"
	// PrivateTinyDiskImage is the same disk in the private registry, pulled as localhost:5001/<name>.
	PrivateTinyDiskImage = "private/tiny-disk:latest"
	// LocalPathProvisionerImage and LocalPathHelperImage are the local cluster's storage
	// (deploy/storage/), pulled as localhost:5000/<name>. LocalPathHelperImage has busybox's sh.
	LocalPathProvisionerImage = "local-path-provisioner:" + LocalPathProvisionerVersion
	LocalPathHelperImage      = "local-path-helper:latest"
	// LocalPathProvisionerVersion is what `make storage-tools` builds.
	LocalPathProvisionerVersion = "v0.0.30"
)

type pushJob struct {
	repoTag string
	build   func() (v1.Image, error)
	private bool
}

func (c *Cluster) pushJobs() []pushJob {
	bin, guest := c.opts.BinDir, c.opts.GuestDir
	jobs := []pushJob{
		{PauseImage, func() (v1.Image, error) { return ociimages.Pause(bin) }, false},
		{TinyKernelImage, func() (v1.Image, error) { return ociimages.TinyKernel(guest) }, false},
		{TinyDiskImage, func() (v1.Image, error) { return ociimages.TinyDisk(guest) }, false},
		{PrivateTinyDiskImage, func() (v1.Image, error) { return ociimages.TinyDisk(guest) }, true},
		{LocalPathProvisionerImage, func() (v1.Image, error) { return ociimages.LocalPathProvisioner(c.localPathProvisionerBinary()) }, false},
		{LocalPathHelperImage, ociimages.LocalPathHelper, false},
	}
	return append(jobs, c.componentJobs(ComponentTag)...)
}

// componentJobs are qvirt's own images (the components' and the launcher's) under tag.
func (c *Cluster) componentJobs(tag string) []pushJob {
	bin := c.opts.BinDir
	jobs := []pushJob{{"qvirt/virt-launcher:" + tag, func() (v1.Image, error) { return ociimages.Launcher(bin) }, false}}
	for _, name := range ociimages.Components {
		jobs = append(jobs, pushJob{"qvirt/" + name + ":" + tag, func() (v1.Image, error) { return ociimages.Component(bin, name) }, false})
	}
	return jobs
}

// PushComponentImages builds qvirt's images from bin/ again and pushes them under tag, as a
// release of another version would be.
func (c *Cluster) PushComponentImages(ctx context.Context, tag string) error {
	return c.push(ctx, c.componentJobs(tag))
}

// pushImages builds every image from bin/ and the test guest and pushes it, as a user's CI would.
func (c *Cluster) pushImages(ctx context.Context) error {
	return c.push(ctx, c.pushJobs())
}

func (c *Cluster) push(ctx context.Context, jobs []pushJob) error {
	for _, j := range jobs {
		began := time.Now()
		img, err := j.build()
		if err != nil {
			return fmt.Errorf("image %s: %w", j.repoTag, err)
		}
		addr, auth := c.RegistryAddr(), authn.Anonymous
		if j.private {
			addr, auth = c.PrivateRegistryAddr(), &authn.Basic{Username: PrivateUser, Password: PrivatePassword}
		}
		if err := ociimages.Push(ctx, img, addr, j.repoTag, auth); err != nil {
			return err
		}
		c.opts.Log.V(1).Info("image pushed", "image", j.repoTag, "registry", addr, "elapsed", time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// localPathProvisionerBinary is the storage provisioner `make storage-tools` builds.
func (c *Cluster) localPathProvisionerBinary() string {
	return filepath.Join(c.opts.ToolsDir, "node", "local-path-provisioner")
}
