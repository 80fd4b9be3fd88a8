package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/qvirt/qvirt/internal/localcluster/nodes"
)

// Sweep removes what a local cluster in dir may have left when it was killed: the nodes'
// processes, containers, cgroups and bridge, changed kernel settings, and any process still
// running from dir. It is safe on a clean machine; `make down` ends with it.
func Sweep(dir, toolsDir string, networkIndex int) error {
	abs, _ := filepath.Abs(dir)
	toolsAbs, _ := filepath.Abs(toolsDir)
	errs := []error{nodes.Sweep(filepath.Join(abs, "nodes"), filepath.Join(toolsAbs, "node"), nodes.Network{Index: networkIndex})}
	killProcessesUsing(abs)
	return errors.Join(errs...)
}

// killProcessesUsing ends every process whose command line names a path under dir, other than
// this one: what a killed run may have left running from its state directory.
func killProcessesUsing(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
