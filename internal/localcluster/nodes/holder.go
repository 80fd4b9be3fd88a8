package nodes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// holderMarker is the holder's $0, for a person reading ps.
const holderMarker = "qvirt-node-holder"

// nodeRunFS names the tmpfs of a node's private /run: a process whose mount table has it lives in
// a node's mount namespace.
const nodeRunFS = "qvirt-node-run"

// holderScript runs as the node's first process, in new mount and network namespaces (unshare).
// It gives the node a private /run, /var/lib and /var/log, binds the node's own directories where
// the kubelet expects them, makes the mounts shared inside the node (as systemd does on a real one,
// for mount propagation into pods), says it is ready, and then only holds the namespaces.
const holderScript = `set -e
mount -t tmpfs -o mode=0755 ` + nodeRunFS + ` /run
mount -t tmpfs -o mode=0755 qvirt-node-lib /var/lib
mount -t tmpfs -o mode=0755 qvirt-node-log /var/log
mkdir -p /run/qvirt /var/lib/kubelet /var/log/pods /var/log/containers
mount --bind "$1" /var/lib/kubelet
mount --bind "$2" /var/log/pods
mount --bind "$3" /run/qvirt
mount --make-rshared /
touch "$4"
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $! || true; done
`

func (n *Node) holderArgs() []string {
	p := n.paths
	return []string{"--mount", "--net", "--propagation", "private", "/bin/sh", "-c", holderScript,
		holderMarker, p.kubeletDir(), p.podLogDir(), p.qvirtRunDir(), p.join("holder.ready")}
}

// waitHolder waits for the holder's ready file.
func (n *Node) waitHolder(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ready := n.paths.join("holder.ready")
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		if !n.holder.Running() {
			return fmt.Errorf("node %s: namespace holder exited: %v (log %s)", n.Name, n.holder.ExitError(), n.holder.LogPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: namespaces not ready after %s (log %s)", n.Name, timeout, n.holder.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nsenterArgs runs binary inside the running holder's namespaces, with PATH set for containerd's
// shim lookup.
func (n *Node) nsenterArgs(binary string, args ...string) []string {
	out := []string{"--target", strconv.Itoa(n.holder.Pid()), "--mount", "--net", "--",
		"/usr/bin/env", "PATH=" + n.opts.ToolsDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", binary}
	return append(out, args...)
}

// leftoverPids finds every process of a run rooted at dir: whatever lives in one of its nodes'
// mount namespaces (holders, kubelet, containerd, kube-proxy, the shims: their mount table has the
// node's private /run and binds from dir), and shims or daemons started from toolsDir with dir on
// their command line. Containers have mount namespaces of their own; their cgroups find them.
func leftoverPids(dir, toolsDir string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, _ := os.Readlink(filepath.Join(p, "exe")); strings.HasPrefix(exe, toolsDir+"/") {
			cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			if strings.Contains(string(cmd), dir+"/") {
				out = append(out, pid)
				continue
			}
		}
		if mounts, err := os.ReadFile(filepath.Join(p, "mountinfo")); err == nil &&
			bytes.Contains(mounts, []byte(" "+nodeRunFS+" ")) && bytes.Contains(mounts, []byte(" "+dir+"/")) {
			out = append(out, pid)
		}
	}
	return out
}

// killPids sends SIGKILL until every pid is gone.
func killPids(pids []int) {
	for i := 0; i < 100 && len(pids) > 0; i++ {
		alive := pids[:0]
		for _, pid := range pids {
			if zombie(pid) {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				alive = append(alive, pid)
			}
		}
		pids = alive
		if len(pids) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// zombie reports a process that has exited and waits only to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}
