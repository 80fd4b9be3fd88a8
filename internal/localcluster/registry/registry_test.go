package registry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/ociimages"
)

// registryBinary is _tools/node/registry of the repository the test runs in.
func registryBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(t), "_tools", "node", "registry")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not built (make nodes): %v", bin, err)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func start(t *testing.T, users map[string]string) *Registry {
	t.Helper()
	r, err := Start(context.Background(), Options{
		Binary:   registryBinary(t),
		Addr:     freeAddr(t),
		Dir:      t.TempDir(),
		Htpasswd: users,
		Log:      testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func TestPushAndPull(t *testing.T) {
	r := start(t, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disk.qcow2"), []byte("a disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ociimages.TinyDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ociimages.Push(ctx, img, r.Addr, "qvirt/tiny-disk:v0.1.0", nil); err != nil {
		t.Fatal(err)
	}
	ref, err := ociimages.Reference(r.Addr, "qvirt/tiny-disk:v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	got, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s as %s, pulled %s", want, ref, got)
	if got != want {
		t.Fatalf("pulled %s, pushed %s", got, want)
	}
	// The layer comes back byte for byte.
	layers, err := pulled.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v %d", err, len(layers))
	}
	wantLayers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	wd, _ := wantLayers[0].Digest()
	if _, err := layers[0].Uncompressed(); err != nil || ld != wd {
		t.Fatalf("layer %s (%v), want %s", ld, err, wd)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "docker", "registry", "v2", "repositories", "qvirt", "tiny-disk")); err != nil {
		t.Fatalf("the repository is not in the storage root: %v", err)
	}

	// Without this the registry posts traces to localhost:4318 and logs every failure.
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(r.Process().Pid()) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\x00"+string(environ)+"\x00", "\x00OTEL_TRACES_EXPORTER=none\x00") {
		t.Fatal("the registry runs with trace export on")
	}

	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + r.Addr + "/v2/"); err == nil {
		t.Fatal("the registry still answers after Stop")
	}
	t.Logf("registry stopped; %s refuses connections", r.Addr)
}

func TestHtpasswdAuth(t *testing.T) {
	users := map[string]string{"qvirt": "s3cret", "other": "pw"}
	r := start(t, users)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "initrd.img"), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := ociimages.TinyKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := &authn.Basic{Username: "qvirt", Password: "s3cret"}
	if err := ociimages.Push(ctx, img, r.Addr, "qvirt/tiny-kernel:v1", nil); !isUnauthorized(err) {
		t.Fatalf("anonymous push: %v, want 401", err)
	}
	if err := ociimages.Push(ctx, img, r.Addr, "qvirt/tiny-kernel:v1", &authn.Basic{Username: "qvirt", Password: "wrong"}); !isUnauthorized(err) {
		t.Fatalf("push with a wrong password: %v, want 401", err)
	}
	if err := ociimages.Push(ctx, img, r.Addr, "qvirt/tiny-kernel:v1", auth); err != nil {
		t.Fatal(err)
	}
	ref, _ := ociimages.Reference(r.Addr, "qvirt/tiny-kernel:v1")
	_, err = remote.Image(ref)
	t.Logf("anonymous pull: %v", err)
	if !isUnauthorized(err) {
		t.Fatalf("anonymous pull: %v, want 401 UNAUTHORIZED", err)
	}
	pulled, err := remote.Image(ref, remote.WithAuth(auth))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pulled.Digest()
	want, _ := img.Digest()
	t.Logf("authenticated pull as qvirt: %s", got)
	if got != want {
		t.Fatalf("pulled %s, pushed %s", got, want)
	}
	if _, err := remote.Image(ref, remote.WithAuth(&authn.Basic{Username: "other", Password: "pw"})); err != nil {
		t.Fatalf("pull as the second user: %v", err)
	}
}

func isUnauthorized(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	if terr.StatusCode == http.StatusUnauthorized {
		return true
	}
	for _, d := range terr.Errors {
		if d.Code == transport.UnauthorizedErrorCode {
			return true
		}
	}
	return false
}

func TestStartFailsWhenTheAddressIsTaken(t *testing.T) {
	bin := registryBinary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(context.Background(), Options{Binary: bin, Addr: l.Addr().String(), Dir: t.TempDir(), Log: testr.New(t)})
	t.Logf("start on a taken address: %v", err)
	if err == nil {
		t.Fatal("Start succeeded on an address another listener holds")
	}
}
