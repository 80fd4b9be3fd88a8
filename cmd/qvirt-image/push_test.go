package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushTarget(t *testing.T) {
	for _, c := range []struct{ ref, registry, addr, repoTag string }{
		{"localhost:5000/qvirt/tiny-disk:v1", "", "localhost:5000", "qvirt/tiny-disk:v1"},
		{"127.0.0.1:5000/qvirt/tiny-disk", "", "127.0.0.1:5000", "qvirt/tiny-disk:latest"},
		{"registry.local/x/y:t", "", "registry.local", "x/y:t"},
		{"localhost:5000/qvirt/tiny-disk:v1", "10.233.0.1:5000", "10.233.0.1:5000", "qvirt/tiny-disk:v1"},
		{"qvirt/virt-handler:v0.1.0", "127.0.0.1:5000", "127.0.0.1:5000", "qvirt/virt-handler:v0.1.0"},
	} {
		addr, repoTag, err := pushTarget(c.ref, c.registry)
		if err != nil || addr != c.addr || repoTag != c.repoTag {
			t.Errorf("pushTarget(%q, %q) = %q, %q, %v; want %q, %q", c.ref, c.registry, addr, repoTag, err, c.addr, c.repoTag)
		}
	}
	for _, ref := range []string{"qvirt/virt-handler:v1", "busybox", "localhost:5000/x@sha256:" + strings.Repeat("a", 64), "Bad Ref"} {
		if _, _, err := pushTarget(ref, ""); err == nil {
			t.Errorf("pushTarget(%q) without --registry succeeded", ref)
		} else {
			t.Logf("%s: %v", ref, err)
		}
	}
}

func TestPushCommand(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.qcow2")
	if err := os.WriteFile(disk, []byte("qcow2 bytes"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out, errOut bytes.Buffer
	// The host in REF is where it goes.
	args := []string{"--owner", "107:107", "localhost:" + strings.Split(addr, ":")[1] + "/qvirt/my-disk:v1", "disk/disk.qcow2=" + disk}
	if err := pushCommand(ctx, args, nil, &out, &errOut); err != nil {
		t.Fatalf("push %q: %v\n%s", args, err, errOut.String())
	}
	t.Logf("push %q: %s", args, strings.TrimSpace(out.String()))
	// --registry overrides it.
	out.Reset()
	args = []string{"--registry", addr, "example.com/qvirt/my-disk:v2", "/disk/disk.qcow2=" + disk}
	if err := pushCommand(ctx, args, nil, &out, &errOut); err != nil {
		t.Fatalf("push %q: %v\n%s", args, err, errOut.String())
	}
	t.Logf("push %q: %s", args, strings.TrimSpace(out.String()))
	if !strings.HasPrefix(out.String(), addr+"/qvirt/my-disk:v2 sha256:") {
		t.Fatalf("output %q", out.String())
	}

	ref, err := name.ParseReference(addr+"/qvirt/my-disk:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, remote.WithAuth(authn.Anonymous))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(mutate.Extract(img))
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "disk/disk.qcow2" {
			continue
		}
		data, _ := io.ReadAll(tr)
		t.Logf("pulled %s: %q mode %o owner %d:%d", h.Name, data, h.Mode, h.Uid, h.Gid)
		if string(data) != "qcow2 bytes" || h.Mode != 0o640 || h.Uid != 107 || h.Gid != 107 {
			t.Fatalf("disk in the pushed image: %q mode %o owner %d:%d", data, h.Mode, h.Uid, h.Gid)
		}
		found = true
	}
	if !found {
		t.Fatal("the pushed image has no /disk/disk.qcow2")
	}

	for _, bad := range [][]string{
		{"--registry", addr, "qvirt/x:v1"},                          // no files
		{"--registry", addr, "qvirt/x:v1", "nohostfile"},            // not PATH=FILE
		{"--registry", addr, "qvirt/x:v1", "/x=" + dir + "/absent"}, // missing host file
		{"--registry", addr, "--password", "p", "qvirt/x:v1", "/x=" + disk},
		{"--registry", addr, "--owner", "root", "qvirt/x:v1", "/x=" + disk},
	} {
		if err := pushCommand(ctx, bad, nil, io.Discard, io.Discard); err == nil {
			t.Errorf("push %q succeeded", bad)
		}
	}
}
