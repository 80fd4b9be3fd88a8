package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

const mib = 1 << 20

// BenchmarkNodeIdle reports what one node costs before any VM runs on it: the resident memory
// (RSS; PSS for the sum too) of its kubelet, containerd and kube-proxy. Its virt-handler pod
// (processes and shim) is reported apart. Run it first or alone: a kubelet that has run VMs keeps
// some of the memory it used for them.
func BenchmarkNodeIdle(b *testing.B) {
	c := localStack(b)
	node := e2eNodes[0]
	waitNoLaunchers(b, c, node)
	time.Sleep(10 * time.Second) // the node's own start settles
	n := c.Nodes.Node(node)
	var rss, pss uint64
	for _, component := range []string{"kubelet", "containerd", "kube-proxy"} {
		pid := n.Pid(component)
		if pid == 0 {
			b.Fatalf("%s of %s is not running", component, node)
		}
		if comm := procComm(pid); comm != component {
			b.Fatalf("pid %d of %s's %s is %q", pid, node, component, comm)
		}
		r, p := memOf(b, pid)
		rss, pss = rss+r, pss+p
		b.ReportMetric(float64(r)/mib, component+"-rss-MiB")
	}
	b.ReportMetric(float64(rss)/mib, "node-idle-rss-MiB")
	b.ReportMetric(float64(pss)/mib, "node-idle-pss-MiB")

	pids := podPids(c, handlerPod(b, c, node))
	if len(pids) > 0 {
		pids = append(pids, parentPid(pids[0]))
	}
	var handler uint64
	for _, pid := range pids {
		r, _ := memOf(b, pid)
		handler += r
	}
	b.ReportMetric(float64(handler)/mib, "virt-handler-pod-rss-MiB")
}

// BenchmarkVMMemory runs 4 small VMIs (128Mi guests, placed by the scheduler), waits until their
// guests have booted, and reports per VM (the mean over the 4), in MiB:
//   - total-per-vm: the RSS summed over every process the VM adds to its node (containerd shim,
//     pause, virt-launcher, QEMU); shared pages (the binaries' text) count in each VM;
//   - pss-per-vm: the same sum of PSS, which splits shared pages between their users;
//   - <process>-rss and <process>-pss for each of those processes;
//   - guest-resident: the resident part of the guest's RAM (the Rss of QEMU's anonymous mapping
//     the size of the guest memory);
//   - qemu-overhead-beyond-resident-guest: QEMU's RSS minus guest-resident.
func BenchmarkVMMemory(b *testing.B) {
	c := localStack(b)
	const n = 4
	const guest = 128 * mib
	specs := make([]map[string]any, n)
	for i := range specs {
		specs[i] = burstSpec(false, "")
	}
	r := startBurst(b, c, specs)
	for _, vmi := range r.vmis {
		waitSerial(b, c, &vmi, "qvirt-guest: booted", 5*time.Minute)
	}
	time.Sleep(5 * time.Second) // the guests' init settles after its marker

	roles := []string{"shim", "pause", "launcher", "qemu"}
	sum := map[string]float64{}
	for _, vmi := range r.vmis {
		var rss, pss uint64
		for _, pid := range vmProcesses(b, c, &vmi) {
			role := processRole(pid)
			r, p := memOf(b, pid)
			rss, pss = rss+r, pss+p
			sum[role+"-rss"] += float64(r)
			sum[role+"-pss"] += float64(p)
			if role == "qemu" {
				resident := guestResident(b, pid, guest)
				sum["guest-resident"] += float64(resident)
				sum["qemu-overhead-beyond-resident-guest"] += float64(r - resident)
			}
		}
		sum["total-per-vm"] += float64(rss)
		sum["pss-per-vm"] += float64(pss)
	}
	for _, k := range []string{"total-per-vm", "pss-per-vm", "qemu-overhead-beyond-resident-guest", "guest-resident"} {
		b.ReportMetric(sum[k]/n/mib, k+"-MiB")
	}
	for _, role := range roles {
		b.ReportMetric(sum[role+"-rss"]/n/mib, role+"-rss-MiB")
		b.ReportMetric(sum[role+"-pss"]/n/mib, role+"-pss-MiB")
	}
	if other := sum["other-rss"]; other > 0 {
		b.ReportMetric(other/n/mib, "other-rss-MiB")
	}
}

// processRole names what a VM's process is, from its command name.
func processRole(pid int) string {
	comm := procComm(pid)
	switch {
	case strings.HasPrefix(comm, "containerd-shim"):
		return "shim"
	case comm == "pause":
		return "pause"
	case comm == "virt-launcher":
		return "launcher"
	case strings.HasPrefix(comm, "qemu-system"):
		return "qemu"
	}
	return "other"
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// memOf is a process's RSS and PSS in bytes, from /proc/<pid>/smaps_rollup.
func memOf(tb testing.TB, pid int) (rss, pss uint64) {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			rss = kb << 10
		case "Pss:":
			pss = kb << 10
		}
	}
	return rss, pss
}

// guestResident is the Rss of QEMU's guest RAM: the anonymous mapping of exactly the guest's
// memory size in /proc/<pid>/smaps (the largest, should there be more than one).
func guestResident(tb testing.TB, pid int, size uint64) uint64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var best uint64
	found, anon, sized := false, false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: address perms offset dev inode [path]; anonymous ones have no path.
			anon, sized = len(fields) == 5, false
			continue
		}
		kb, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "Size:":
			sized = anon && kb<<10 == size
		case "Rss:":
			if sized {
				found, best = true, max(best, kb<<10)
			}
		}
	}
	if !found {
		tb.Fatalf("QEMU %d has no anonymous mapping of %d bytes", pid, size)
	}
	return best
}

// waitSerial waits until the VMI's serial console log has want.
func waitSerial(tb testing.TB, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance, want string, within time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(time.Second) {
		if strings.Contains(serialLog(c, vmi), want) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s never showed %q in its serial log", vmi.Name, want)
		}
	}
}

// waitNoLaunchers waits until no launcher pod is left on node.
func waitNoLaunchers(tb testing.TB, c *localcluster.Cluster, node string) {
	tb.Helper()
	cl := kv(tb, c)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		var pods corev1.PodList
		err := cl.List(context.Background(), &pods, client.MatchingLabels{"kubevirt.io": "virt-launcher"})
		left := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == node {
				left++
			}
		}
		if err == nil && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d launcher pods still on %s: %v", left, node, err)
		}
	}
}
