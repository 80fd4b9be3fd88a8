// Package images is a local OCI image store: an OCI image layout directory (index.json and
// blobs/sha256) whose images are named by org.opencontainers.image.ref.name annotations. Local
// mode keeps the images VMs name (containerDisk, kernelBoot) here, since no registry or container
// runtime is available; File unpacks an image once and returns paths inside it, which makes a
// *Store a launcherspec.ImageResolver.
package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/qvirt/qvirt/node/launcherspec"
)

// refNameAnnotation names an image in an OCI layout's index.json; the store keeps the normalised
// reference there.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// DiskDir is where a containerDisk image keeps its disk (KubeVirt's convention): File with an
// empty path returns the single file in it.
const DiskDir = "/disk"

// Store is an OCI image layout on disk. Its methods are safe for concurrent use, also by several
// processes: writers take a file lock, and unpacked images appear by atomic rename.
type Store struct {
	dir      string
	cacheDir string
	layout   layout.Path

	mu        sync.Mutex
	unpacking map[string]*sync.Mutex // by manifest digest
}

// Open opens the image layout in dir, creating an empty one when dir holds none. Unpacked images
// are cached in dir + "-unpacked", next to the layout.
func Open(dir string) (*Store, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, cacheDir: dir + "-unpacked", unpacking: map[string]*sync.Mutex{}}
	if s.layout, err = layout.FromPath(dir); err == nil {
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have created it while we waited for the lock.
	if s.layout, err = layout.FromPath(dir); err == nil {
		return s, nil
	}
	if s.layout, err = layout.Write(dir, empty.Index); err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	return s, nil
}

// Dir is the layout directory.
func (s *Store) Dir() string { return s.dir }

// lock serialises writers of index.json across processes.
func (s *Store) lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock image store %s: %w", s.dir, err)
	}
	return func() { f.Close() }, nil
}

// Add stores an image of one layer holding files (path in the image -> file on the host) under
// ref, replacing the image ref named before. Equal content gives an equal digest: timestamps and
// owners in the layer are fixed.
func (s *Store) Add(ref string, files map[string]string) error {
	norm, err := Normalize(ref)
	if err != nil {
		return err
	}
	if _, digest := splitDigest(norm); digest != "" {
		return fmt.Errorf("add %s: name the image by tag, not by digest", ref)
	}
	if len(files) == 0 {
		return fmt.Errorf("add %s: no files", ref)
	}
	img, cleanup, err := buildImage(s.dir, files)
	if err != nil {
		return fmt.Errorf("add %s: %w", ref, err)
	}
	defer cleanup()

	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	anns := map[string]string{refNameAnnotation: norm}
	if err := s.layout.ReplaceImage(img, match.Name(norm), layout.WithAnnotations(anns)); err != nil {
		return fmt.Errorf("add %s: %w", ref, err)
	}
	// A replaced image leaves blobs nothing refers to.
	unused, err := s.layout.GarbageCollect()
	if err != nil {
		return fmt.Errorf("add %s: collect unused blobs: %w", ref, err)
	}
	for _, h := range unused {
		if err := s.layout.RemoveBlob(h); err != nil {
			return fmt.Errorf("add %s: %w", ref, err)
		}
	}
	return nil
}

// epoch is every timestamp in images Add builds, so their digests depend on content only.
var epoch = time.Unix(0, 0).UTC()

// buildImage writes the layer tarball to a temporary file in dir and returns the image.
func buildImage(dir string, files map[string]string) (v1.Image, func(), error) {
	tmp, err := os.CreateTemp(dir, ".layer-*.tar")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.Remove(tmp.Name()) }
	err = writeLayer(tmp, files)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	layer, err := tarball.LayerFromFile(tmp.Name(), tarball.WithMediaType(types.OCILayer))
	if err == nil {
		var img v1.Image
		base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		if img, err = mutate.ConfigFile(base, &v1.ConfigFile{OS: "linux", Architecture: "amd64", Created: v1.Time{Time: epoch}}); err == nil {
			if img, err = mutate.AppendLayers(img, layer); err == nil {
				return img, cleanup, nil
			}
		}
	}
	cleanup()
	return nil, nil, err
}

// writeLayer writes files, and the directories above them, as an uncompressed tar in path order.
func writeLayer(w io.Writer, files map[string]string) error {
	entries := map[string]string{} // clean path in the image -> host file ("" for a directory)
	for in, host := range files {
		p := strings.TrimPrefix(path.Clean("/"+in), "/")
		if p == "" || in == "" {
			return fmt.Errorf("invalid path %q in the image", in)
		}
		if _, dup := entries[p]; dup {
			return fmt.Errorf("path %s given twice", p)
		}
		entries[p] = host
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if h, ok := entries[d]; ok && h != "" {
				return fmt.Errorf("%s is both a file and a directory", d)
			}
			entries[d] = ""
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)

	tw := tar.NewWriter(w)
	for _, p := range names {
		host := entries[p]
		hdr := &tar.Header{Name: p, ModTime: epoch, Format: tar.FormatPAX}
		if host == "" {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, p+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, hdr, host); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, hdr *tar.Header, host string) error {
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", host)
	}
	hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, info.Size(), int64(info.Mode().Perm())
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	return nil
}

// Has reports whether ref names an image in the store.
func (s *Store) Has(ref string) bool {
	_, err := s.find(ref)
	return err == nil
}

// Digest returns the manifest digest ("sha256:...") of the image ref names.
func (s *Store) Digest(ref string) (string, error) {
	desc, err := s.find(ref)
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// find looks ref up in index.json, read afresh so that images added by other processes count.
// A digest reference matches an image of the same repository with that manifest digest.
func (s *Store) find(ref string) (v1.Descriptor, error) {
	norm, err := Normalize(ref)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%w: %w", launcherspec.ErrImageNotFound, err)
	}
	idx, err := s.layout.ImageIndex()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("image store %s: %w", s.dir, err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("image store %s: %w", s.dir, err)
	}
	repo, digest := splitDigest(norm)
	for _, d := range manifest.Manifests {
		name := d.Annotations[refNameAnnotation]
		if name == norm || digest != "" && d.Digest.String() == digest && repository(name) == repo {
			return d, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("%w: %s in %s", launcherspec.ErrImageNotFound, norm, s.dir)
}

// File returns the host path of file p inside image, unpacking the image on first use. An empty
// p returns the single file under /disk/, as KubeVirt finds a containerDisk's disk. An image the
// store lacks gives an error wrapping launcherspec.ErrImageNotFound; a path the image lacks, one
// wrapping fs.ErrNotExist.
func (s *Store) File(image, p string) (string, error) {
	desc, err := s.find(image)
	if err != nil {
		return "", err
	}
	root, err := s.unpack(desc.Digest)
	if err != nil {
		return "", fmt.Errorf("unpack %s: %w", image, err)
	}
	if p == "" {
		return singleDisk(root, image)
	}
	return resolveIn(root, p)
}

// singleDisk is the only regular file in the image's /disk directory.
func singleDisk(root, image string) (string, error) {
	dir := filepath.Join(root, DiskDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("image %s has no %s directory: %w", image, DiskDir, err)
	}
	var found []string
	for _, e := range ents {
		if !e.IsDir() {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("image %s: no file in %s: %w", image, DiskDir, fs.ErrNotExist)
	case 1:
		return resolveIn(root, path.Join(DiskDir, found[0]))
	}
	return "", fmt.Errorf("image %s: %d files in %s (%s): name the one to use", image, len(found), DiskDir, strings.Join(found, ", "))
}

// resolveIn returns the host path of p in the unpacked tree at root, following symbolic links
// only as far as they stay inside root.
func resolveIn(root, p string) (string, error) {
	host := filepath.Join(root, filepath.FromSlash(path.Clean("/"+p)))
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return "", fmt.Errorf("%s in the image: %w", p, err)
	}
	if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
		return "", fmt.Errorf("%s in the image points outside it", p)
	}
	info, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s in the image is not a regular file", p)
	}
	return real, nil
}

// unpack extracts the image with manifest digest h into the cache once and returns its root.
func (s *Store) unpack(h v1.Hash) (string, error) {
	final := filepath.Join(s.cacheDir, h.Algorithm+"-"+h.Hex)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	s.mu.Lock()
	m, ok := s.unpacking[h.String()]
	if !ok {
		m = &sync.Mutex{}
		s.unpacking[h.String()] = m
	}
	s.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}

	img, err := s.layout.Image(h)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.cacheDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(s.cacheDir, ".unpack-")
	if err != nil {
		return "", err
	}
	rc := mutate.Extract(img)
	err = extractTar(tmp, rc)
	rc.Close()
	if err == nil {
		err = os.Chmod(tmp, 0o755)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.RemoveAll(tmp)
		// Another process unpacked the same image first: use its copy.
		if dirExists(final) {
			return final, nil
		}
		return "", err
	}
	return final, nil
}

func dirExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

// extractTar writes a flattened image filesystem (from mutate.Extract, which has already
// dropped unsafe paths) under root: directories, regular files and symbolic links.
func extractTar(root string, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + hdr.Name)
		if name == "/" {
			continue
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			// Read-only: every VM using the image shares this copy.
			if err := writeFile(dst, tr, os.FileMode(hdr.Mode).Perm()&^0o222); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, dst); err != nil {
				return err
			}
		default:
			// Devices, fifos and hard links have no use in a VM image.
		}
	}
}

func writeFile(dst string, r io.Reader, perm os.FileMode) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
