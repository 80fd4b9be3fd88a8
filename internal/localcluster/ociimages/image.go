// Package ociimages builds the single-platform linux/amd64 OCI images that local clusters pull from
// their registry (virt-api, virt-controller, virt-handler, virt-launcher with QEMU, pause, and the
// test guest's kernel and disk) straight from files on this machine, without a container daemon.
// Equal inputs give equal digests: entries are sorted and every timestamp is fixed, so pushing an
// unchanged image uploads nothing.
package ociimages

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer.
type File struct {
	// Path is the absolute path in the image.
	Path string
	// Source is the host file a regular file's content is read from (when Content is nil).
	Source string
	// Content is a regular file's content when it has no Source.
	Content []byte
	// Mode holds the permission bits (with setuid, setgid and sticky) and, for a directory or a
	// symlink, os.ModeDir or os.ModeSymlink. Zero permissions on a file from Source take the host
	// file's; on a directory, 0755.
	Mode os.FileMode
	// Link is a symlink's target.
	Link string
	// UID and GID own the entry.
	UID, GID int
}

// Dir is a directory entry.
func Dir(path string, perm os.FileMode) File { return File{Path: path, Mode: os.ModeDir | perm} }

// Symlink is a symlink entry at path pointing to target.
func Symlink(path, target string) File {
	return File{Path: path, Mode: os.ModeSymlink | 0o777, Link: target}
}

// Spec describes an image: its layers, bottom first, and the config of its containers.
type Spec struct {
	Layers     [][]File
	Entrypoint []string
	Cmd        []string
	// Env defaults to a PATH of the usual directories.
	Env []string
	// WorkingDir defaults to /.
	WorkingDir string
	// User defaults to root (0:0), numeric so that it resolves without /etc/passwd.
	User   string
	Labels map[string]string
}

// DefaultPath is the PATH of every image whose Spec names no Env.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// epoch is every timestamp in the images, so that digests depend on content only.
var epoch = time.Unix(0, 0).UTC()

// Build assembles the image. Layers are streamed from their files when digested and pushed;
// the compressed form is kept in memory once made, so a push compresses each layer once.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("image has no layers")
	}
	layers, err := normalizeLayers(spec.Layers)
	if err != nil {
		return nil, err
	}
	cfg := v1.Config{
		Entrypoint: spec.Entrypoint,
		Cmd:        spec.Cmd,
		Env:        spec.Env,
		WorkingDir: spec.WorkingDir,
		User:       spec.User,
		Labels:     spec.Labels,
	}
	if cfg.Env == nil {
		cfg.Env = []string{DefaultPath}
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = "/"
	}
	if cfg.User == "" {
		cfg.User = "0:0"
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, &v1.ConfigFile{
		OS:           "linux",
		Architecture: "amd64",
		Created:      v1.Time{Time: epoch},
		Config:       cfg,
	})
	if err != nil {
		return nil, err
	}
	for i, entries := range layers {
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return streamTar(entries), nil },
			tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression),
			tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		// AppendLayers would add a history entry stamped with the current time.
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}}})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}

// Files is an image of one layer holding files, with no entrypoint (a containerDisk or
// kernelBoot image).
func Files(files ...File) (v1.Image, error) {
	return Build(Spec{Layers: [][]File{files}})
}
