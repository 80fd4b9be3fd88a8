package podrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func testNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("qvtest-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if _, err := createNetns(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteNetns(name); err != nil {
			t.Error(err)
		}
		if netnsExists(name) {
			t.Errorf("netns %s left behind", name)
		}
	})
	return name
}

func startFake(t *testing.T, netns string, env ...string) (launch, procRef, procRef) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := launch{
		Argv:    []string{exe, "--dir", dir, "--vmi", "ns/vm"},
		Env:     append([]string{"PATH=" + os.Getenv("PATH"), fakeLauncherEnv + "=1"}, env...),
		Dir:     "/",
		Netns:   netnsPath(netns),
		LogFile: filepath.Join(dir, "launcher.log"), PidFile: filepath.Join(dir, "launcher.pid"), ExitFile: filepath.Join(dir, "launcher.exit"),
	}
	shim, launcher, err := startShim(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killSession(shim.Pid) })
	waitFor(t, 10*time.Second, "fake.pid", func() bool { _, err := os.Stat(filepath.Join(dir, "fake.pid")); return err == nil })
	return l, shim, launcher
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestShimStartsInNetnsAndRecordsExit(t *testing.T) {
	requireRoot(t)
	ns := testNetns(t)
	l, shim, launcher := startFake(t, ns, "FAKE_CHILD=1")
	dir := filepath.Dir(l.LogFile)

	if !launcher.alive() || launcher.Start == 0 {
		t.Fatalf("launcher %+v not alive", launcher)
	}
	st, _ := readStat(launcher.Pid)
	if st.session != shim.Pid {
		t.Errorf("launcher session %d, want the shim's %d", st.session, shim.Pid)
	}
	want, _ := netnsInode(netnsPath(ns))
	if got, _ := netnsInode(fmt.Sprintf("/proc/%d/ns/net", launcher.Pid)); got != want {
		t.Errorf("launcher in netns inode %d, want %d", got, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "fake.pid"))
	if pid, _ := strconv.Atoi(string(b)); pid != launcher.Pid {
		t.Errorf("the shim reported pid %d, the launcher says %d", launcher.Pid, pid)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "child.pid"))
	child, _ := strconv.Atoi(string(b))

	// A second watcher on the same process stands for a restarted runner.
	w1, w2 := watch(launcher), watch(launcher)
	w1.release()
	if isDone(w2.done) {
		t.Fatal("watcher done while the launcher runs")
	}
	os.WriteFile(filepath.Join(dir, "exit"), []byte("7"), 0o644)
	select {
	case <-w2.done:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not see the launcher exit")
	}
	waitFor(t, 5*time.Second, "exit file", func() bool { _, ok := readExit(l.ExitFile); return ok })
	if code, _ := readExit(l.ExitFile); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	if launcher.alive() {
		t.Error("launcher alive after exit")
	}
	// The crashed launcher's "QEMU" is still there, in the session, until killSession.
	if !contains(sessionMembers(shim.Pid), child) {
		t.Fatalf("child %d not in session %d: %v", child, shim.Pid, sessionMembers(shim.Pid))
	}
	if left := killSession(shim.Pid); len(left) > 0 {
		t.Fatalf("killSession left %v", left)
	}
	if err := unix.Kill(child, 0); err == nil {
		if st, err := readStat(child); err == nil && st.state != 'Z' {
			t.Errorf("child %d survived", child)
		}
	}
	if log, _ := os.ReadFile(l.LogFile); !strings.Contains(string(log), "crashing with 7") {
		t.Errorf("launcher log: %q", log)
	}
}

func TestShimSigterm(t *testing.T) {
	requireRoot(t)
	ns := testNetns(t)
	l, shim, launcher := startFake(t, ns)
	w := watch(launcher)
	if err := w.signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("launcher ignored SIGTERM")
	}
	waitFor(t, 5*time.Second, "exit file", func() bool { _, ok := readExit(l.ExitFile); return ok })
	if code, _ := readExit(l.ExitFile); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	waitFor(t, 5*time.Second, "the shim to end", func() bool { return len(sessionMembers(shim.Pid)) == 0 })
}

func TestShimFailedExec(t *testing.T) {
	requireRoot(t)
	ns := testNetns(t)
	dir := t.TempDir()
	l := launch{
		Argv: []string{filepath.Join(dir, "missing")}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Netns: netnsPath(ns),
		LogFile: filepath.Join(dir, "log"), PidFile: filepath.Join(dir, "pid"), ExitFile: filepath.Join(dir, "exit"),
	}
	_, launcher, err := startShim(l)
	if err != nil {
		t.Fatal(err)
	}
	w := watch(launcher)
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no exit seen")
	}
	waitFor(t, 5*time.Second, "exit file", func() bool { _, ok := readExit(l.ExitFile); return ok })
	if code, _ := readExit(l.ExitFile); code != 127 {
		t.Errorf("exit code %d, want 127 (not found)", code)
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A runner that died between starting a launcher and saving the pod's state leaves a launcher, a
// namespace and an address that no state names; the next runner removes them.
func TestUnfinishedStartIsCleanedUp(t *testing.T) {
	requireRoot(t)
	requireCNI(t)
	nodeNS := testNetns(t)
	stateDir := t.TempDir()
	r := &Runner{opts: Options{StateDir: stateDir}}
	var err error
	if r.net, err = newNetwork(CNIOptions{PluginDir: DefaultCNIPluginDir, Bridge: "qv-test", Subnet: "10.244.99.0/24", NetworkName: "qvirt-test"}, netnsPath(nodeNS), stateDir); err != nil {
		t.Fatal(err)
	}
	sb := &sandbox{PodUID: "unfinished-uid", Namespace: "ns", Name: "p", Netns: podNetns("unfinished-uid")}
	if _, err := createNetns(sb.Netns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNetns(sb.Netns) })
	ips, err := r.net.add(t.Context(), sb)
	if err != nil || len(ips) != 1 {
		t.Fatalf("CNI ADD: %v, %v", ips, err)
	}
	allocated := filepath.Join(stateDir, "cni", "ipam", "qvirt-test", ips[0])
	if _, err := os.Stat(allocated); err != nil {
		t.Fatalf("host-local keeps no %s: %v", allocated, err)
	}
	dir := r.podDir(sb.PodUID)
	os.MkdirAll(dir, 0o755)
	exe, _ := os.Executable()
	shim, launcher, err := startShim(launch{
		Argv: []string{exe, "--dir", dir}, Env: []string{"PATH=" + os.Getenv("PATH"), fakeLauncherEnv + "=1", "FAKE_CHILD=1"}, Dir: "/", Netns: netnsPath(sb.Netns),
		LogFile: filepath.Join(dir, "launcher.log"), PidFile: filepath.Join(dir, "launcher.pid"), ExitFile: r.exitFile(sb),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killSession(shim.Pid) })
	waitFor(t, 10*time.Second, "the fake launcher", func() bool { _, err := os.Stat(filepath.Join(dir, "child.pid")); return err == nil })

	sbs, err := r.loadSandboxes()
	if err != nil || len(sbs) != 0 {
		t.Fatalf("loadSandboxes = %v, %v; want none", sbs, err)
	}
	if launcher.alive() || len(sessionMembers(shim.Pid)) > 0 {
		t.Errorf("launcher or its child still run: %v", sessionMembers(shim.Pid))
	}
	if netnsExists(sb.Netns) {
		t.Error("netns left")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("pod directory left")
	}
	// The address is released (host-local keeps one file per address in use).
	if _, err := os.Stat(allocated); err == nil {
		t.Errorf("address %s still allocated", ips[0])
	}
}
