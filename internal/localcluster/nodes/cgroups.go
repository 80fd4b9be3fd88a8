package nodes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMount is where the cgroup v1 controllers are mounted, one directory each.
const cgroupMount = "/sys/fs/cgroup"

// v1Controllers lists the mounted cgroup v1 hierarchies (named ones such as systemd included, the
// cgroup2 "unified" mount of a hybrid setup left out: the kubelet's cgroupRoot is needed in v1 only).
func v1Controllers() ([]string, error) { return hierarchies(false) }

// hierarchies lists the cgroup mounts, the unified one of a hybrid setup too when asked: the
// kubelet creates its cgroups there as well, and they must go when the node does.
func hierarchies(withUnified bool) ([]string, error) {
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || (e.Name() == "unified" && !withUnified) {
			continue
		}
		if _, err := os.Stat(filepath.Join(cgroupMount, e.Name(), "cgroup.procs")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// createCgroupRoot makes root (e.g. /qvirt-node01) under every controller, as the kubelet's
// cgroupRoot must exist before it starts; cpuset needs its cpus and mems filled in first.
func createCgroupRoot(root string) error {
	ctrls, err := v1Controllers()
	if err != nil {
		return err
	}
	for _, c := range ctrls {
		dir := filepath.Join(cgroupMount, c, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if c != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(cgroupMount, c, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("%s/%s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// removeCgroupRoot kills every process left in root's cgroups (containers whose shim is gone) and
// removes the cgroups, deepest first.
func removeCgroupRoot(root string) error {
	ctrls, err := hierarchies(true)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range ctrls {
		top := filepath.Join(cgroupMount, c, root)
		if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := killCgroupTree(top); err != nil {
			errs = append(errs, err)
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroupTree sends SIGKILL to every process under top until none is left.
func killCgroupTree(top string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cgroupPids(top)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", top, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cgroupPids(top string) []int {
	var pids []int
	_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// rmdirRetry removes an empty cgroup; the kernel refuses while a dying process is still counted.
func rmdirRetry(dir string) error {
	var err error
	for i := 0; i < 50; i++ {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
