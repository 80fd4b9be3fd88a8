package controlplane

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Binaries are the programs a cluster runs, all expected in one directory (`make k8s` builds them).
var Binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"}

const modulePath = "github.com/qvirt/qvirt"

// DefaultBinDir is <repo>/_tools/k8s, the repository found by walking up from the working directory.
func DefaultBinDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRepoRoot(dir) {
			return filepath.Join(dir, "_tools", "k8s"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s checkout above the working directory: set Options.BinDir", modulePath)
		}
		dir = parent
	}
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}

// checkBinaries reports every missing or non-executable binary in dir.
func checkBinaries(dir string) error {
	var errs []error
	for _, name := range Binaries {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, err)
		case info.IsDir() || info.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file", path))
		}
	}
	return errors.Join(errs...)
}

// RequireBinaries returns the default BinDir, or skips the test when the control-plane binaries are not
// built. Under CI (CI set in the environment) it fails instead: CI builds them, and a skip there would
// hide a broken build.
func RequireBinaries(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kubernetes control plane; -short skips it")
	}
	dir, err := DefaultBinDir()
	if err == nil {
		err = checkBinaries(dir)
	}
	if err == nil {
		return dir
	}
	msg := fmt.Sprintf("Kubernetes control-plane binaries missing (run `make k8s`): %v", err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
