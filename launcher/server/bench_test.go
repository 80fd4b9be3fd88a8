package server

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// BenchmarkLauncherRSS runs the real virt-launcher binary with one booted guest and reports
// the launcher's resident memory, QEMU excluded (QEMU's own RSS is reported beside it).
func BenchmarkLauncherRSS(b *testing.B) {
	testenv.RequireQEMU(b)
	g := testenv.RequireGuest(b)
	bin := filepath.Join(b.TempDir(), "virt-launcher")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(testenv.RepoRoot(b), "cmd", "virt-launcher")).CombinedOutput(); err != nil {
		b.Fatalf("build: %v: %s", err, out)
	}
	dir := filepath.Join(b.TempDir(), "vm")
	cmd := exec.Command(bin, "--dir", dir, "--vmi", "bench/rss")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	sock := filepath.Join(dir, SocketName)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("launcher socket never appeared")
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := launcherapi.NewLauncherClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := &launcherapi.VMSpec{
		Namespace: "bench", Name: "rss", MachineType: "q35", Accel: launcherapi.Accel_ACCEL_TCG,
		Cpu: &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1}, MemoryBytes: 128 << 20, Acpi: true,
		Firmware: &launcherapi.Firmware{KernelBoot: &launcherapi.KernelBoot{KernelPath: g.Kernel, InitrdPath: g.Initrd, Cmdline: "console=ttyS0 quiet"}},
		Devices:  &launcherapi.Devices{SerialConsole: true, Vnc: true, MemBalloon: true, Rng: true},
	}
	st, err := client.Sync(ctx, &launcherapi.SyncRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	con := testenv.DialConsole(b, filepath.Join(dir, "serial0.sock"))
	if err := con.WaitFor(ctx, testenv.MarkerBooted); err != nil {
		b.Fatal(err)
	}
	// Exercise the API a little so the measurement includes a used gRPC server and QMP client,
	// and measure what one statistics snapshot (the node agent takes one per VM every 10 s)
	// costs: its latency, and the CPU time the launcher and QEMU spend on it (utime+stime
	// from /proc, both processes; the idle guest's own CPU time is in it too).
	const calls = 50
	cpu0 := cpuTime(b, cmd.Process.Pid) + cpuTime(b, int(st.QemuPid))
	t0 := time.Now()
	for i := 0; i < calls; i++ {
		if _, err := client.Stats(ctx, &launcherapi.Empty{}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	cpu := cpuTime(b, cmd.Process.Pid) + cpuTime(b, int(st.QemuPid)) - cpu0
	b.ReportMetric(float64(elapsed.Microseconds())/calls/1000, "stats-call-ms")
	b.ReportMetric(float64(cpu.Microseconds())/calls/1000, "stats-cpu-ms")
	b.ReportMetric(float64(vmRSS(b, cmd.Process.Pid))/(1<<20), "launcher-rss-MiB")
	b.ReportMetric(float64(vmRSS(b, int(st.QemuPid)))/(1<<20), "qemu-rss-MiB")
}

// cpuTime is a process's user and system CPU time so far (/proc/PID/stat, clock ticks of 10 ms).
func cpuTime(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func vmRSS(b *testing.B, pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
}
