package vm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
)

// guestSpec is the tiny guest booted by kernel under emulation, with every device on.
func guestSpec(g testenv.Guest, name string) *launcherapi.VMSpec {
	return &launcherapi.VMSpec{
		Namespace:   "test",
		Name:        name,
		MachineType: "q35",
		Accel:       launcherapi.Accel_ACCEL_TCG,
		Cpu:         &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1},
		MemoryBytes: 256 << 20,
		Acpi:        true,
		Firmware: &launcherapi.Firmware{KernelBoot: &launcherapi.KernelBoot{
			KernelPath: g.Kernel, InitrdPath: g.Initrd, Cmdline: "console=ttyS0 quiet"}},
		Devices: &launcherapi.Devices{SerialConsole: true, Vnc: true, MemBalloon: true, Rng: true},
	}
}

func startVM(t *testing.T, spec *launcherapi.VMSpec, taps map[string]*os.File) (*VM, *testenv.Console) {
	t.Helper()
	v := New(Config{Dir: filepath.Join(t.TempDir(), "vm"), Taps: taps})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.Start(ctx, spec); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		_ = v.Kill(context.Background())
	})
	return v, testenv.DialConsole(t, v.Layout().SerialSocket())
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run types a command at the guest shell and waits for a line it prints.
func run(t *testing.T, c *testenv.Console, cmd, want string) {
	t.Helper()
	if err := c.Type(cmd + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(within(t, 60*time.Second), want); err != nil {
		t.Fatal(err)
	}
}

func TestBootConsoleVNCPauseStats(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	spec := guestSpec(g, "boot")
	spec.Devices.GuestAgent = true
	spec.Disks = []*launcherapi.Disk{{Name: "rootdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{
		ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: g.Disk, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}}
	var taps map[string]*os.File
	const mac = "02:00:00:12:34:56"
	if os.Geteuid() == 0 {
		taps = map[string]*os.File{"tap0": testenv.OpenTap(t, fmt.Sprintf("qvt%d", os.Getpid()%100000))}
		spec.Interfaces = []*launcherapi.Interface{{Name: "default", MacAddress: mac, TapFdName: "tap0"}}
	}
	v, con := startVM(t, spec, taps)

	if err := con.WaitFor(within(t, 90*time.Second), testenv.MarkerBooted); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.State != launcherapi.State_STATE_RUNNING || st.QemuPid == 0 {
		t.Fatalf("status after boot: %v", st)
	}
	if err := con.WaitFor(within(t, 30*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	run(t, con, "echo sum-$((40+2))", "sum-42")
	if taps != nil {
		run(t, con, "cat /sys/class/net/eth0/address", mac)
	}

	t.Run("QEMU runs under its seccomp filter", func(t *testing.T) {
		pid := v.Status().QemuPid
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cmdline), "-sandbox\x00"+qemuargs.SandboxOptions+"\x00") {
			t.Errorf("QEMU's command line has no -sandbox %s: %q", qemuargs.SandboxOptions, cmdline)
		}
		// QEMU holds more seccomp filters than the test that started it: its own. The guest
		// booted with it, so the filter lets QEMU run.
		if own, qemu := seccompFilters(t, "self"), seccompFilters(t, fmt.Sprint(pid)); qemu <= own {
			t.Errorf("QEMU has %d seccomp filters, the test %d", qemu, own)
		}
	})
	t.Run("the guest agent answers, and stops answering when it stops", func(t *testing.T) {
		agent := func(want bool) *launcherapi.GuestAgentInfo {
			t.Helper()
			var ga *launcherapi.GuestAgentInfo
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if ga = v.Status().GetGuestAgent(); ga.GetConnected() == want {
					return ga
				}
			}
			t.Fatalf("guest agent connected=%v never; last %v", want, ga)
			return nil
		}
		ga := agent(true)
		if ga.Version == "" || ga.Os.GetId() != "qvirt-tiny" || ga.Os.GetVersionId() != "1" || ga.Os.GetKernelRelease() == "" || ga.Hostname != "qvirt" {
			t.Errorf("guest agent info: %v", ga)
		}
		if !slices.Contains(ga.SupportedCommands, "guest-ping") {
			t.Errorf("supported commands: %v", ga.SupportedCommands)
		}
		run(t, con, "kill $(cat /run/qemu-ga.pid) && echo agent-$((2*4))", "agent-8")
		agent(false)
		run(t, con, `for p in /sys/class/virtio-ports/*; do [ "$(cat $p/name)" = org.qemu.guest_agent.0 ] && qemu-ga -m virtio-serial -p /dev/${p##*/} -d -f /run/qemu-ga.pid -t /run && echo agent-$((3*4)); done`, "agent-12")
		agent(true)
	})
	t.Run("vnc answers RFB", func(t *testing.T) {
		conn, err := net.DialTimeout("unix", v.Layout().VNCSocket(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		hello := make([]byte, 12)
		if _, err := io.ReadFull(conn, hello); err != nil {
			t.Fatal(err)
		}
		if string(hello) != "RFB 003.008\n" {
			t.Errorf("VNC greeting %q", hello)
		}
	})

	t.Run("screenshot is a PNG", func(t *testing.T) {
		png, err := v.Screenshot(within(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(png) < 100 || string(png[:8]) != "\x89PNG\r\n\x1a\n" {
			t.Errorf("not a PNG: %d bytes %q", len(png), png[:min(8, len(png))])
		}
	})

	t.Run("pause stops the guest", func(t *testing.T) {
		ctx := within(t, 30*time.Second)
		if err := v.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err := v.QMPStatus(ctx); err != nil || s != "paused" {
			t.Fatalf("QMP status %q, %v; want paused", s, err)
		}
		if v.Status().State != launcherapi.State_STATE_PAUSED {
			t.Fatalf("state %v, want paused", v.Status().State)
		}
		// A paused guest cannot echo what is typed; it answers only once resumed.
		if err := con.Type("echo resumed-$((3*3))\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if strings.Contains(con.Output(), "resumed-9") {
			t.Fatal("guest ran while paused")
		}
		if err := v.Unpause(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err := v.QMPStatus(ctx); err != nil || s != "running" {
			t.Fatalf("QMP status %q, %v; want running", s, err)
		}
		if err := con.WaitFor(within(t, 30*time.Second), "resumed-9"); err != nil {
			t.Fatal(err)
		}
		if v.Status().State != launcherapi.State_STATE_RUNNING {
			t.Fatalf("state %v, want running", v.Status().State)
		}
	})

	t.Run("stats", func(t *testing.T) {
		st, err := v.Stats(within(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if st.Cpu.UserNs+st.Cpu.SystemNs == 0 {
			t.Error("no QEMU CPU time")
		}
		if len(st.Vcpus) != 1 || st.Vcpus[0].RunNs == 0 || st.Vcpus[0].ThreadId == 0 {
			t.Errorf("vCPU stats: %v", st.Vcpus)
		}
		if st.Memory.RssBytes == 0 || st.Memory.GuestBytes != 256<<20 || st.Memory.BalloonActualBytes != 256<<20 {
			t.Errorf("memory stats: %v", st.Memory)
		}
		if len(st.Block) != 1 || st.Block[0].Drive != "rootdisk" || st.Block[0].ReadBytes == 0 || st.Block[0].ReadOps == 0 {
			t.Errorf("block stats: %v", st.Block)
		}
		// That snapshot started a one-second dirty-rate sample; a later one reports it.
		time.Sleep(1500 * time.Millisecond)
		if st, err = v.Stats(within(t, 30*time.Second)); err != nil || st.DirtyRate == nil {
			t.Errorf("no dirty rate a sample after the first snapshot: %v %v", st.GetDirtyRate(), err)
		}
	})
}

func TestCloudInitAndContainerDiskOverlay(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	// A private copy of the base, so its checksum belongs to this test alone.
	base := filepath.Join(t.TempDir(), "base.qcow2")
	copyFile(t, g.Disk, base)
	before := fileSum(t, base)

	spec := guestSpec(g, "cloudinit")
	spec.Disks = []*launcherapi.Disk{
		{Name: "containerdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{
			ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: base, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}},
		{Name: "cloudinitdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_CloudInitNoCloud{
			CloudInitNoCloud: &launcherapi.CloudInitNoCloudSource{
				MetaData: "instance-id: ci-test\nlocal-hostname: ci-host\n",
				UserData: "#!/bin/sh\n" +
					"echo user-data-ran-$((6*7))\n" +
					"mkdir -p /mnt/d && mount /dev/vda /mnt/d && cat /mnt/d/hello.txt\n" +
					"echo written-by-guest > /mnt/d/new.txt && sync && umount /mnt/d && echo disk-write-ok\n",
			}}},
	}
	v, con := startVM(t, spec, nil)
	ctx := within(t, 120*time.Second)
	for _, want := range []string{"user-data-ran-42", "qvirt-disk-content", "disk-write-ok", "qvirt-guest: user-data done rc=0"} {
		if err := con.WaitFor(ctx, want); err != nil {
			t.Fatal(err)
		}
	}
	overlay := v.Layout().DiskImage(spec.Disks[0]).Path
	if err := v.Shutdown(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if after := fileSum(t, base); after != before {
		t.Error("the container disk base changed; writes must go to the overlay")
	}
	if st, err := os.Stat(overlay); err != nil || st.Size() == 0 {
		t.Errorf("overlay: %v %v", st, err)
	}
}

func TestShutdownWithGracePowersOff(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	v, con := startVM(t, guestSpec(g, "graceful"), nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	events, cancel := v.Subscribe()
	defer cancel()
	if err := v.Shutdown(within(t, 90*time.Second), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	st := v.Status()
	if st.State != launcherapi.State_STATE_STOPPED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_SHUTDOWN {
		t.Fatalf("status %v, want STOPPED/SHUTDOWN", st)
	}
	if !strings.Contains(con.Output(), "qvirt-guest: powering off") {
		t.Errorf("the guest did not power itself off; console:\n%s", con.Output())
	}
	var states []launcherapi.State
	for ev := range events {
		states = append(states, ev.State)
	}
	if len(states) < 2 || states[len(states)-1] != launcherapi.State_STATE_STOPPED {
		t.Errorf("event states %v, want ... SHUTTING_DOWN, STOPPED", states)
	}
}

func TestSoftRebootRestartsTheGuestInPlace(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	v, con := startVM(t, guestSpec(g, "softreboot"), nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the power-button handler starts with the prompt
	pid := v.Status().QemuPid
	if err := v.SoftReboot(within(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); strings.Count(con.Output(), testenv.MarkerBooted) < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not boot again; console:\n%s", con.Output())
		}
	}
	if !strings.Contains(con.Output(), "qvirt-guest: powering off") {
		t.Error("the guest was reset without powering off first")
	}
	st := v.Status()
	if st.QemuPid != pid || st.State != launcherapi.State_STATE_RUNNING {
		t.Errorf("after the soft reboot: pid %d (was %d), state %v", st.QemuPid, pid, st.State)
	}
	if s, err := v.QMPStatus(within(t, 10*time.Second)); err != nil || s != "running" {
		t.Errorf("QMP status %q %v", s, err)
	}
}

func TestShutdownWithoutGraceKills(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	v, con := startVM(t, guestSpec(g, "nograce"), nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.MarkerBooted); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := v.Shutdown(within(t, 10*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	st := v.Status()
	if st.State != launcherapi.State_STATE_STOPPED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_KILLED {
		t.Fatalf("status %v, want STOPPED/KILLED", st)
	}
	if strings.Contains(con.Output(), "powering off") {
		t.Error("grace 0 must not wait for the guest")
	}
	t.Logf("killed in %v", time.Since(t0))
}

func TestQEMUCrashIsReported(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	v, con := startVM(t, guestSpec(g, "crash"), nil)
	if err := con.WaitFor(within(t, 90*time.Second), testenv.MarkerBooted); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(int(v.Status().QemuPid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-v.Exited():
	case <-time.After(time.Second):
		t.Fatal("crash not reported within 1s")
	}
	st := v.Status()
	if st.State != launcherapi.State_STATE_CRASHED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_CRASHED || !strings.Contains(st.Message, "signal killed") {
		t.Fatalf("status %v, want CRASHED with the signal", st)
	}
}

func TestInvalidSpecFailsStart(t *testing.T) {
	v := New(Config{Dir: t.TempDir()})
	spec := &launcherapi.VMSpec{Name: "bad", Disks: []*launcherapi.Disk{{Name: "d", Bus: launcherapi.Bus(9)}}}
	err := v.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "spec.memory_bytes") || !strings.Contains(err.Error(), "spec.disks[0].bus") {
		t.Fatalf("want errors naming the fields, got %v", err)
	}
	st := v.Status()
	if st.State != launcherapi.State_STATE_CRASHED || st.ExitReason != launcherapi.ExitReason_EXIT_REASON_FAILED_START {
		t.Errorf("status %v", st)
	}
	if err := v.Start(context.Background(), spec); err != ErrAlreadyStarted {
		t.Errorf("second start: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReader(f)); err != nil {
		t.Fatal(err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// TestStartPausedWaitsForUnpause: with start_paused (startStrategy: Paused) the guest does not run
// until it is unpaused, and then boots.
func TestStartPausedWaitsForUnpause(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	spec := guestSpec(g, "paused-start")
	spec.StartPaused = true
	v, con := startVM(t, spec, nil)
	if st := v.Status(); st.State != launcherapi.State_STATE_PAUSED {
		t.Fatalf("state after start %v, want paused", st.State)
	}
	ctx := within(t, 30*time.Second)
	if s, err := v.QMPStatus(ctx); err != nil || s == "running" {
		t.Fatalf("QMP status %q, %v: the guest runs", s, err)
	}
	time.Sleep(2 * time.Second)
	if strings.Contains(con.Output(), testenv.MarkerBooted) {
		t.Fatal("the guest booted before it was unpaused")
	}
	if err := v.Unpause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := con.WaitFor(within(t, 90*time.Second), testenv.MarkerBooted); err != nil {
		t.Fatal(err)
	}
	if st := v.Status(); st.State != launcherapi.State_STATE_RUNNING {
		t.Fatalf("state after unpause %v, want running", st.State)
	}
}

// seccompFilters is the Seccomp_filters count of /proc/<pid>/status.
func seccompFilters(t *testing.T, pid string) int {
	t.Helper()
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("this kernel reports no Seccomp_filters")
	return 0
}
