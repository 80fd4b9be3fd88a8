package ociimages

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHostTreeKeepsSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	lib := writeFile(t, filepath.Join(dir, "real/lib/libx.so.1.2"), "lib", 0o644)
	for link, target := range map[string]string{
		"lib":                "real/lib",    // a directory link, relative
		"real/lib/libx.so.1": "libx.so.1.2", // a library's soname link
		"abs":                filepath.Join(dir, "lib", "libx.so.1"),
		"loop1":              "loop2",
		"loop2":              "loop1",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	tree := newHostTree()
	if err := tree.Add(filepath.Join(dir, "abs")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range tree.Files() {
		got = append(got, strings.TrimPrefix(f.Path, dir)+" "+f.Mode.Type().String()+" "+f.Link)
	}
	t.Logf("entries for %s/abs: %q", dir, got)
	want := []string{
		"/abs L--------- " + filepath.Join(dir, "lib/libx.so.1"),
		"/lib L--------- real/lib",
		"/real/lib/libx.so.1 L--------- libx.so.1.2",
		"/real/lib/libx.so.1.2 ---------- ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	if r := tree.Resolve(filepath.Join(dir, "abs")); r != lib {
		t.Fatalf("abs resolves to %s in the tree, want %s", r, lib)
	}
	// The entries form a valid layer: nothing lies under a symlink.
	if _, err := Build(Spec{Layers: [][]File{tree.Files()}}); err != nil {
		t.Fatal(err)
	}
	err := newHostTree().Add(filepath.Join(dir, "loop1"))
	t.Logf("symlink loop: %v", err)
	if err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Fatalf("symlink loop: %v", err)
	}
}

func TestHostTreeAddsLibraryClosure(t *testing.T) {
	const qemuImg = "/usr/bin/qemu-img"
	if _, err := os.Stat(qemuImg); err != nil {
		t.Skipf("%s (Debian package qemu-utils) is not installed", qemuImg)
	}
	tree := newHostTree()
	if err := tree.Add(qemuImg); err != nil {
		t.Fatal(err)
	}
	files := tree.Files()
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	t.Logf("%s brings %d entries", qemuImg, len(files))
	libs, err := ldd(qemuImg)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range append(libs, "/lib64/ld-linux-x86-64.so.2") {
		r := tree.Resolve(lib)
		f, ok := byPath[r]
		if !ok || !f.Mode.IsRegular() || f.Source != r {
			t.Fatalf("library %s (at %s) is not a file in the tree: %+v", lib, r, f)
		}
	}
	if _, err := Build(Spec{Layers: [][]File{files}}); err != nil {
		t.Fatal(err)
	}
	// A static binary needs nothing.
	tree = newHostTree()
	if err := tree.Add("/bin/busybox"); err != nil {
		t.Skipf("busybox-static: %v", err)
	}
	for _, f := range tree.Files() {
		if strings.Contains(f.Path, "/lib") {
			t.Fatalf("static busybox brought %s", f.Path)
		}
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f1)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n"
	libs, err := parseLdd("x", out)
	want := []string{"/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if err != nil || !slices.Equal(libs, want) {
		t.Fatalf("parseLdd: %q, %v; want %q", libs, err, want)
	}
	if _, err := parseLdd("x", "\tlibfoo.so.3 => not found\n"); err == nil {
		t.Fatal("a missing library went unnoticed")
	}
	if libs, err := parseLdd("x", "\tstatically linked\n"); err != nil || len(libs) != 0 {
		t.Fatalf("static: %q, %v", libs, err)
	}
}
