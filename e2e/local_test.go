package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// The whole stack, brought up the way `make up` does it, shared by the tests of this package.
var (
	local     *localcluster.Cluster
	localErr  error
	localOnce sync.Once
	localDir  string
)

// e2eNodes differ from `make up`'s and from any other test run's, so the tests never touch a
// cluster someone else runs on this machine.
var e2eNodes = []string{fmt.Sprintf("e2e%d-n1", os.Getpid()%10000), fmt.Sprintf("e2e%d-n2", os.Getpid()%10000)}

func localStack(t testing.TB) *localcluster.Cluster {
	t.Helper()
	controlplane.RequireBinaries(t)
	testenv.RequireQEMU(t)
	testenv.RequireRoot(t)
	root := testenv.RepoRoot(t)
	for _, b := range []string{"virt-operator", "virt-api", "virt-controller", "virt-handler", "virt-launcher", "qvirt-pause"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("bin/%s missing: make test builds it", b)
			}
			t.Skipf("bin/%s not built (run `make build`)", b)
		}
	}
	localOnce.Do(func() {
		localDir, localErr = os.MkdirTemp("", "qvirt-e2e-local-")
		if localErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// Network 1: `make run` uses 0, so both can run on one machine.
		local, localErr = localcluster.Up(ctx, localcluster.Options{Root: root, Dir: localDir, Nodes: e2eNodes, NetworkIndex: 1, Log: logr.Discard()})
	})
	if localErr != nil {
		t.Fatalf("local cluster: %v (logs in %s and %s)", localErr, filepath.Join(localDir, "logs"), filepath.Join(localDir, "nodes", "*", "logs"))
	}
	return local
}

func stopLocal() {
	if local != nil {
		if err := local.Down(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "local cluster teardown: %v\n", err)
		}
	}
	if localDir != "" {
		os.RemoveAll(localDir)
	}
}

func kv(t testing.TB, c *localcluster.Cluster) client.Client {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	cl, err := client.New(c.K8s.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
