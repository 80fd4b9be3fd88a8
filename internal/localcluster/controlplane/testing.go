package controlplane

import (
	"strings"
	"testing"
)

// ForTest starts a control plane for t (skipping as RequireBinaries does when it cannot), in a
// directory of t's unless opts names one, and stops it when t ends.
func ForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if bin := RequireBinaries(t); opts.BinDir == "" {
		opts.BinDir = bin
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Log(err)
		}
	})
	return c
}

// MustKubectl runs kubectl against c and fails t with its output if it fails.
func (c *Cluster) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
