package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// TestMain runs virt-launcher's main when the test binary is started as the launcher.
func TestMain(m *testing.M) {
	if os.Getenv("QVIRT_TEST_RUN_LAUNCHER") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Deleting a launcher pod sends SIGTERM to virt-launcher: the guest gets its grace to power off,
// the launcher exits 0, and everything it said is on stderr, where the kubelet takes the
// container's log from.
func TestSIGTERMPowersTheGuestOff(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a real VM")
	}
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	tmp := t.TempDir()
	dir, ephemeral := filepath.Join(tmp, "vm"), filepath.Join(tmp, "ephemeral")
	spec := g.LauncherSpec("sigterm", 256)
	b, err := protojson.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(tmp, "spec.json")
	if err := os.WriteFile(specFile, b, 0o644); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "--dir", dir, "--ephemeral-dir", ephemeral, "--vmi", "test/sigterm", "--stop-grace-period", "60s", "--spec", specFile)
	cmd.Env = append(os.Environ(), "QVIRT_TEST_RUN_LAUNCHER=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	con := testenv.DialConsole(t, filepath.Join(dir, "serial0.sock"))
	if err := con.WaitFor(ctx, testenv.Prompt); err != nil {
		t.Fatalf("%v\nlauncher stderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ephemeral, "rootdisk.qcow2")); err != nil {
		t.Errorf("overlay not in --ephemeral-dir: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // the guest's power-button handler starts just after the prompt

	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("launcher still running 90s after SIGTERM\nstderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("launcher exited with %v\nstderr:\n%s", err, stderr.String())
	}
	log := stderr.String()
	for _, want := range []string{"launcher serving", "launcher asked to stop", `reason="EXIT_REASON_SHUTDOWN"`} {
		if !strings.Contains(log, want) {
			t.Errorf("stderr lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "grace period exhausted") {
		t.Errorf("the guest did not power off within its grace:\n%s", log)
	}
	t.Logf("SIGTERM to exit: %v", time.Since(sent).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(dir, "qemu.log")); err != nil {
		t.Errorf("QEMU's log is not in the VM directory: %v", err)
	}
}
