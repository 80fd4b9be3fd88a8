package ociimages

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The local cluster's storage (deploy/storage/) is rancher's local-path-provisioner; it is not part
// of qvirt. These are its images: the provisioner, and the helper its pods run to create and remove
// a volume's directory on a node.

// LocalPathProvisionerBinary is where the provisioner is in the provisioner image.
const LocalPathProvisionerBinary = "/usr/bin/local-path-provisioner"

// localPathHelperApplets are what the provisioner's setup and teardown scripts (sh, mkdir, rm,
// chmod) and a test pod writing into a volume need.
var localPathHelperApplets = []string{
	"sh", "mkdir", "rm", "rmdir", "chmod", "ls", "cat", "echo", "test", "touch", "sync", "sleep", "stat",
}

// LocalPathProvisioner is the image of the provisioner binary at src (`make storage-tools`).
func LocalPathProvisioner(src string) (v1.Image, error) {
	bin, err := binaryFiles(src, LocalPathProvisionerBinary)
	if err != nil {
		return nil, err
	}
	return Build(Spec{
		Layers:     [][]File{baseFiles(), bin},
		Entrypoint: []string{LocalPathProvisionerBinary},
		Labels:     map[string]string{"org.opencontainers.image.title": "local-path-provisioner"},
	})
}

// LocalPathHelper is the provisioner's helper image: the host's static busybox as /bin/sh and the
// applets the volume scripts run.
func LocalPathHelper() (v1.Image, error) {
	bb, err := busyboxWith(localPathHelperApplets)
	if err != nil {
		return nil, err
	}
	return Build(Spec{
		Layers:     [][]File{append(baseFiles(), bb...)},
		Entrypoint: []string{"/bin/sh"},
		Labels:     map[string]string{"org.opencontainers.image.title": "local-path-helper"},
	})
}
