package ociimages

import (
	"archive/tar"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var time1 = time.Unix(1234567890, 0)

func writeFile(t *testing.T, p, content string, perm os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	// Explicit, since the umask may have dropped bits.
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a"), "alpha", 0o755)
	b := writeFile(t, filepath.Join(dir, "b"), "beta", 0o644)
	spec := func() Spec {
		return Spec{
			Layers:     [][]File{{{Path: "/usr/bin/a", Source: a}, {Path: "/etc/b", Source: b}}},
			Entrypoint: []string{"/usr/bin/a"},
		}
	}
	digest := func(s Spec) string {
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	first := digest(spec())
	// Files given in another order, and the host files touched: same image.
	reordered := spec()
	slices.Reverse(reordered.Layers[0])
	if err := os.Chtimes(a, time1, time1); err != nil {
		t.Fatal(err)
	}
	second := digest(reordered)
	t.Logf("same inputs: %s and %s", first, second)
	if first != second {
		t.Fatalf("equal inputs gave different digests %s and %s", first, second)
	}
	writeFile(t, b, "gamma", 0o644)
	if changed := digest(spec()); changed == first {
		t.Fatalf("changed content kept the digest %s", first)
	}
	writeFile(t, b, "beta", 0o600)
	if changed := digest(spec()); changed == first {
		t.Fatalf("changed mode kept the digest %s", first)
	}
}

func TestBuildLayerAndConfig(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, filepath.Join(dir, "tool"), "#!/bin/sh\n", 0o750)
	img, err := Build(Spec{
		Layers: [][]File{
			{
				Dir("/tmp", 0o777|os.ModeSticky),
				{Path: "/etc/passwd", Content: []byte("root:x:0:0::/:/bin/sh\n"), Mode: 0o644},
				Symlink("/bin", "usr/bin"),
				{Path: "/usr/bin/tool", Source: bin},
			},
			{{Path: "/usr/bin/tool2", Source: bin, Mode: 0o700, UID: 107, GID: 108}, Symlink("/bin", "usr/bin")},
		},
		Entrypoint: []string{"/usr/bin/tool"},
		Cmd:        []string{"--flag"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	t.Logf("config: os=%s arch=%s entrypoint=%q cmd=%q env=%q user=%q workdir=%q created=%v",
		cf.OS, cf.Architecture, c.Entrypoint, c.Cmd, c.Env, c.User, c.WorkingDir, cf.Created)
	if cf.OS != "linux" || cf.Architecture != "amd64" || !slices.Equal(c.Entrypoint, []string{"/usr/bin/tool"}) ||
		!slices.Equal(c.Cmd, []string{"--flag"}) || !slices.Equal(c.Env, []string{DefaultPath}) ||
		c.User != "0:0" || c.WorkingDir != "/" || !cf.Created.Equal(epoch) {
		t.Fatalf("unexpected config %+v", cf)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(epoch) {
			t.Fatalf("history stamped %v", h.Created)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers: %v, %d", err, len(layers))
	}
	hdrs, order := layerEntries(t, layers[0])
	t.Logf("layer 0: %q", order)
	if want := []string{"bin", "etc", "etc/passwd", "tmp", "usr", "usr/bin", "usr/bin/tool"}; !slices.Equal(order, want) {
		t.Fatalf("layer 0 entries %q, want %q (sorted, with parents)", order, want)
	}
	check := func(name string, typ byte, mode int64) *tar.Header {
		h := hdrs[name]
		if h.Typeflag != typ || h.Mode != mode || !h.ModTime.Equal(epoch) {
			t.Fatalf("%s: type %c mode %o mtime %v, want type %c mode %o mtime %v", name, h.Typeflag, h.Mode, h.ModTime, typ, mode, epoch)
		}
		return h
	}
	check("tmp", tar.TypeDir, 0o1777)
	check("usr", tar.TypeDir, 0o755)
	check("usr/bin/tool", tar.TypeReg, 0o750) // the host file's mode
	check("etc/passwd", tar.TypeReg, 0o644)
	if h := check("bin", tar.TypeSymlink, 0o777); h.Linkname != "usr/bin" {
		t.Fatalf("bin -> %s", h.Linkname)
	}
	hdrs, order = layerEntries(t, layers[1])
	t.Logf("layer 1: %q", order)
	// The symlink identical to layer 0's and the directories layer 0 has are left out.
	if !slices.Equal(order, []string{"usr/bin/tool2"}) {
		t.Fatalf("layer 1 entries %q", order)
	}
	if h := check("usr/bin/tool2", tar.TypeReg, 0o700); h.Uid != 107 || h.Gid != 108 || h.Size != int64(len("#!/bin/sh\n")) {
		t.Fatalf("tool2: uid %d gid %d size %d", h.Uid, h.Gid, h.Size)
	}
}

func TestBuildRejectsBadLayers(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, filepath.Join(dir, "f"), "x", 0o644)
	for name, layers := range map[string][][]File{
		"relative path":        {{{Path: "usr/bin/x", Source: f}}},
		"root":                 {{{Path: "/", Source: f}}},
		"no content":           {{{Path: "/x", Mode: 0o644}}},
		"source and content":   {{{Path: "/x", Source: f, Content: []byte("y")}}},
		"two kinds":            {{{Path: "/x", Source: f}, Dir("/x", 0o755)}},
		"under a file":         {{{Path: "/x", Source: f}, {Path: "/x/y", Source: f}}},
		"under a symlink":      {{Symlink("/bin", "usr/bin"), {Path: "/bin/x", Source: f}}},
		"under a lower link":   {{Symlink("/bin", "usr/bin")}, {{Path: "/bin/x", Source: f}}},
		"symlink no target":    {{{Path: "/l", Mode: os.ModeSymlink}}},
		"missing source":       {{{Path: "/x", Source: filepath.Join(dir, "missing")}}},
		"directory as content": {{{Path: "/x", Source: dir}}},
	} {
		_, err := Build(Spec{Layers: layers})
		t.Logf("%s: %v", name, err)
		if err == nil {
			t.Errorf("%s: Build accepted %+v", name, layers)
		}
	}
	if _, err := Build(Spec{}); err == nil || !strings.Contains(err.Error(), "no layers") {
		t.Errorf("no layers: %v", err)
	}
}
