package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/qvirt/qvirt/internal/pki"
)

// kubeletSysctls are the machine-wide settings a kubelet changes at start with no way to opt out
// (pkg/kubelet/cm setupKernelTunables). The cluster saves them before its first kubelet starts and
// restores them when it goes down.
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", nodeSysctlUserfaultfd,
}

// nodeSysctlUserfaultfd is set to 1 on VM nodes, as KubeVirt documents for post-copy
// migration: the target's QEMU takes page faults with userfaultfd, which an unprivileged launcher
// may not use otherwise. It is machine-wide, so it is saved and restored with the kubelet's.
const nodeSysctlUserfaultfd = "vm.unprivileged_userfaultfd"

// prepareVMNodeSysctls applies what a VM node needs beyond the kubelet's own settings.
func prepareVMNodeSysctls() error {
	return os.WriteFile(sysctlPath(nodeSysctlUserfaultfd), []byte("1"), 0o644)
}

// saveSysctls records the current values in file, unless file exists: then an earlier run that did
// not go down cleanly saved the machine's own values, and those are the ones to keep.
func saveSysctls(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	saved := map[string]string{}
	for _, k := range kubeletSysctls {
		v, err := readSysctl(k)
		if err != nil {
			return err
		}
		saved[k] = v
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(file, b, 0o644)
}

// restoreSysctls writes back what saveSysctls recorded, then removes file.
func restoreSysctls(file string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	saved := map[string]string{}
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for k, v := range saved {
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s=%s: %w", k, v, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.Remove(file)
}

// sysctlPath is the file of a sysctl key such as kernel.panic.
func sysctlPath(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(key))
	return strings.TrimSpace(string(b)), err
}
