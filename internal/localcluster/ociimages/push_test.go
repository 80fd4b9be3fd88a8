package ociimages

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushUploadsOnlyMissingBlobs(t *testing.T) {
	var uploads atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A blob upload starts with a POST to .../blobs/uploads/.
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/blobs/uploads/") {
			uploads.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "disk.qcow2"), "disk", 0o644)
	img, err := TinyDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Push(ctx, img, addr, "qvirt/tiny-disk:v1", nil); err != nil {
		t.Fatal(err)
	}
	first := uploads.Load()
	// The same image under another tag: layer and config are there already.
	if err := Push(ctx, img, addr, "qvirt/tiny-disk:v2", nil); err != nil {
		t.Fatal(err)
	}
	second := uploads.Load() - first
	t.Logf("blob uploads: %d for the first push (layer and config), %d for the same image again", first, second)
	if first != 2 || second != 0 {
		t.Fatalf("blob uploads %d then %d, want 2 then 0", first, second)
	}
	ref, err := Reference(addr, "qvirt/tiny-disk:v2")
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	got, _ := pulled.Digest()
	if got != want {
		t.Fatalf("pulled %s, pushed %s", got, want)
	}
	if err := Push(ctx, img, addr, "Not A Tag", nil); err == nil {
		t.Fatal("Push accepted a malformed reference")
	}
}
