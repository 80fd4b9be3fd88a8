package images

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/qvirt/qvirt/node/launcherspec"
)

var _ launcherspec.ImageResolver = (*Store)(nil)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"localhost/qvirt/tiny-disk":              "localhost/qvirt/tiny-disk:latest",
		"localhost/qvirt/tiny-disk:latest":       "localhost/qvirt/tiny-disk:latest",
		"localhost:5000/a/b:v1":                  "localhost:5000/a/b:v1",
		"busybox":                                "docker.io/library/busybox:latest",
		"docker.io/library/busybox":              "docker.io/library/busybox:latest",
		"index.docker.io/library/busybox":        "docker.io/library/busybox:latest",
		"kubevirt/cirros-container-disk-demo:v1": "docker.io/kubevirt/cirros-container-disk-demo:v1",
		"quay.io/containerdisks/fedora@sha256:" + strings.Repeat("a", 64): "quay.io/containerdisks/fedora@sha256:" + strings.Repeat("a", 64),
	} {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b"} {
		if got, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", bad, got)
		}
	}
}

func writeHostFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStoreRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "images")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	kernel := writeHostFile(t, tmp, "vmlinuz", "kernel-bytes")
	initrd := writeHostFile(t, tmp, "initrd", "initrd-bytes")
	disk := writeHostFile(t, tmp, "disk.qcow2", "qcow2-bytes")

	if err := s.Add("localhost/qvirt/tiny-kernel", map[string]string{"/boot/vmlinuz": kernel, "boot/initrd.img": initrd}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("localhost/qvirt/tiny-disk:latest", map[string]string{"/disk/disk.qcow2": disk}); err != nil {
		t.Fatal(err)
	}

	// A fresh Open sees what another process added: the layout on disk is the only state.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"localhost/qvirt/tiny-kernel", "localhost/qvirt/tiny-kernel:latest", "localhost/qvirt/tiny-disk"} {
		if !s2.Has(ref) {
			t.Errorf("Has(%q) = false", ref)
		}
	}
	if s2.Has("localhost/qvirt/tiny-disk:v2") || s2.Has("tiny-disk") {
		t.Error("Has is true for an image never added")
	}

	check := func(image, p, want string) string {
		t.Helper()
		got, err := s2.File(image, p)
		if err != nil {
			t.Fatalf("File(%q, %q): %v", image, p, err)
		}
		b, err := os.ReadFile(got)
		if err != nil || string(b) != want {
			t.Fatalf("File(%q, %q) = %s holding %q, %v; want %q", image, p, got, b, err, want)
		}
		return got
	}
	k1 := check("localhost/qvirt/tiny-kernel:latest", "/boot/vmlinuz", "kernel-bytes")
	check("localhost/qvirt/tiny-kernel", "boot/initrd.img", "initrd-bytes")
	d := check("localhost/qvirt/tiny-disk", "", "qcow2-bytes")
	if filepath.Base(d) != "disk.qcow2" || !strings.HasPrefix(d, dir+"-unpacked"+string(filepath.Separator)) {
		t.Errorf("disk unpacked to %s, want .../disk.qcow2 under %s-unpacked", d, dir)
	}
	// Unpacked once: the same path again, read-only.
	if k2 := check("localhost/qvirt/tiny-kernel", "/boot/vmlinuz", "kernel-bytes"); k2 != k1 {
		t.Errorf("second File = %s, want the cached %s", k2, k1)
	}
	if info, err := os.Stat(k1); err != nil || info.Mode().Perm()&0o222 != 0 {
		t.Errorf("unpacked file mode = %v, %v; want read-only", info.Mode(), err)
	}

	// By digest.
	digest, err := s2.Digest("localhost/qvirt/tiny-disk")
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("Digest = %q, %v", digest, err)
	}
	check("localhost/qvirt/tiny-disk@"+digest, "", "qcow2-bytes")
	if s2.Has("localhost/qvirt/tiny-kernel@" + digest) {
		t.Error("a digest of another repository matched")
	}

	// Errors.
	_, err = s2.File("localhost/qvirt/missing", "")
	if !errors.Is(err, launcherspec.ErrImageNotFound) {
		t.Errorf("File(unknown image) error = %v, want ErrImageNotFound", err)
	}
	if _, err := s2.File("not a ref", ""); !errors.Is(err, launcherspec.ErrImageNotFound) {
		t.Errorf("File(invalid ref) error = %v, want ErrImageNotFound", err)
	}
	if _, err := s2.File("localhost/qvirt/tiny-kernel", "/boot/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("File(missing path) error = %v, want fs.ErrNotExist", err)
	}
	if _, err := s2.File("localhost/qvirt/tiny-kernel", ""); err == nil {
		t.Error("File(kernel image, \"\") found a disk")
	}
	if _, err := s2.File("localhost/qvirt/tiny-kernel", "/boot"); err == nil {
		t.Error("File of a directory succeeded")
	}

	// Same content, same digest: Add is reproducible.
	if err := s.Add("localhost/qvirt/tiny-disk", map[string]string{"/disk/disk.qcow2": disk}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Digest("localhost/qvirt/tiny-disk"); again != digest {
		t.Errorf("re-adding the same files changed the digest: %s -> %s", digest, again)
	}
}

func TestAddReplacesAndCollects(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "images")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	one := writeHostFile(t, tmp, "one", "one")
	two := writeHostFile(t, tmp, "two", "two")
	if err := s.Add("localhost/x", map[string]string{"/disk/d.img": one}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.File("localhost/x", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("localhost/x:latest", map[string]string{"/disk/d.img": two}); err != nil {
		t.Fatal(err)
	}
	p, err := s.File("localhost/x", "")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("after replacing, the disk holds %q", b)
	}

	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations[refNameAnnotation] != "localhost/x:latest" {
		t.Errorf("index.json manifests = %+v, want one named localhost/x:latest", index.Manifests)
	}
	// manifest, config and layer of the one image remain.
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 3 {
		t.Errorf("%d blobs after replacing, want 3", len(blobs))
	}
}

func TestConcurrentFile(t *testing.T) {
	tmp := t.TempDir()
	s, err := Open(filepath.Join(tmp, "images"))
	if err != nil {
		t.Fatal(err)
	}
	disk := writeHostFile(t, tmp, "d", strings.Repeat("x", 1<<20))
	if err := s.Add("localhost/c", map[string]string{"/disk/d": disk}); err != nil {
		t.Fatal(err)
	}
	// Two stores on one directory stand for two processes.
	other, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		st := s
		if i%2 == 1 {
			st = other
		}
		wg.Go(func() { paths[i], errs[i] = st.File("localhost/c", "") })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("File #%d = %s, %v; want %s", i, paths[i], errs[i], paths[0])
		}
	}
	ents, _ := os.ReadDir(s.Dir() + "-unpacked")
	if len(ents) != 1 {
		t.Errorf("%d entries in the unpack cache, want 1 (no temporary directories left)", len(ents))
	}
}

func TestAddRejects(t *testing.T) {
	tmp := t.TempDir()
	s, err := Open(filepath.Join(tmp, "images"))
	if err != nil {
		t.Fatal(err)
	}
	f := writeHostFile(t, tmp, "f", "f")
	for name, c := range map[string]struct {
		ref   string
		files map[string]string
	}{
		"no files":          {"localhost/a", nil},
		"bad ref":           {"Not/Valid", map[string]string{"/f": f}},
		"digest ref":        {"localhost/a@sha256:" + strings.Repeat("b", 64), map[string]string{"/f": f}},
		"missing host file": {"localhost/a", map[string]string{"/f": filepath.Join(tmp, "nope")}},
		"directory":         {"localhost/a", map[string]string{"/f": tmp}},
		"file and dir":      {"localhost/a", map[string]string{"/a": f, "/a/b": f}},
		"root":              {"localhost/a", map[string]string{"/": f}},
	} {
		if err := s.Add(c.ref, c.files); err == nil {
			t.Errorf("%s: Add succeeded", name)
		}
	}
	if s.Has("localhost/a") {
		t.Error("a rejected Add left an image")
	}
}
