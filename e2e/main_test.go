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
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/qvirt/qvirt/e2e/stack"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// One control plane serves every test of the package: starting one costs seconds.
var (
	shared     *stack.Stack
	sharedErr  error
	sharedOnce sync.Once
	sharedDir  string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	stopLocal()
	if shared != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// controlPlane returns the shared stack, starting it on first use.
func controlPlane(t testing.TB) *stack.Stack {
	t.Helper()
	controlplane.RequireBinaries(t)
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "qvirt-e2e-")
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared, sharedErr = stack.Start(ctx, stack.Options{Dir: sharedDir, Root: testenv.RepoRoot(t), Log: logr.Discard()})
	})
	if sharedErr != nil {
		t.Fatalf("control plane: %v (logs under %s)", sharedErr, filepath.Join(sharedDir, "cluster", "logs"))
	}
	return shared
}

func kubectl(t testing.TB, s *stack.Stack, args ...string) (string, error) {
	t.Helper()
	out, err := s.Cluster.Kubectl(args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}
