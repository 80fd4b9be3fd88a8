package qmp

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// qemuVM is a QEMU process started paused, with no guest to boot.
type qemuVM struct {
	cmd    *exec.Cmd
	exited chan struct{}
	client *Client
	dir    string
}

// startQEMU runs qemu-system-x86_64 under TCG with a QMP socket in a temp dir
// and connects to it. It skips the test where QEMU is not installed.
func startQEMU(tb testing.TB, extra ...string) *qemuVM {
	tb.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		tb.Skip("qemu-system-x86_64 is not in PATH (make deps installs it)")
	}
	if testing.Short() {
		tb.Skip("starts QEMU; skipped in -short mode")
	}
	dir := tb.TempDir()
	sock := filepath.Join(dir, "qmp.sock")
	args := append([]string{
		"-S", "-nodefaults", "-no-user-config",
		"-machine", "q35", "-accel", "tcg", "-display", "none", "-m", "64",
		"-qmp", "unix:" + sock + ",server=on,wait=off",
	}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	vm := &qemuVM{cmd: cmd, exited: make(chan struct{}), dir: dir}
	go func() {
		cmd.Wait()
		close(vm.exited)
	}()
	tb.Cleanup(func() {
		cmd.Process.Kill()
		<-vm.exited
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		select {
		case <-vm.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := Dial(ctx, sock, WithDialRetry(10*time.Millisecond))
	if err != nil {
		tb.Fatalf("connecting to QEMU: %v\nQEMU stderr: %s", err, stderr.String())
	}
	tb.Cleanup(func() { c.Close() })
	vm.client = c
	return vm
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestQEMU(t *testing.T) {
	vm := startQEMU(t,
		"-device", "VGA",
		"-device", "virtio-balloon-pci,id=balloon0",
		"-drive", "if=none,id=drive0,driver=null-co",
	)
	c := vm.client
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if maj, _, _ := c.Version(); maj < 7 {
		t.Logf("QEMU %d.x is older than the 7.2 this package targets", maj)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatusPrelaunch || st.Running {
		t.Errorf("initial status = %+v, want prelaunch", st)
	}

	events, cancelEvents := c.Subscribe(64)
	defer cancelEvents()

	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx); err != nil || st.Status != StatusRunning || !st.Running {
		t.Errorf("after cont: %+v, %v", st, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitEvent(ctx, events, EventName("STOP")); err != nil {
		t.Errorf("no STOP event: %v", err)
	}
	if st, err := c.Status(ctx); err != nil || st.Status != StatusPaused || st.Running {
		t.Errorf("after stop: %+v, %v", st, err)
	}

	t.Run("query-cpus-fast", func(t *testing.T) {
		cpus, err := c.QueryCPUsFast(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cpus) != 1 || cpus[0].ThreadID <= 0 || cpus[0].QOMPath == "" || cpus[0].Target != "x86_64" {
			t.Errorf("cpus = %+v", cpus)
		}
	})

	t.Run("query-blockstats", func(t *testing.T) {
		stats, err := c.QueryBlockStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(stats) != 1 || stats[0].Device != "drive0" {
			t.Errorf("blockstats = %+v", stats)
		}
	})

	t.Run("query-stats", func(t *testing.T) {
		// TCG registers no statistics provider: empty, not an error.
		for _, target := range []string{StatsTargetVM, StatsTargetVCPU} {
			res, err := c.QueryStats(ctx, target)
			if err != nil {
				t.Errorf("%s: %v", target, err)
			}
			t.Logf("query-stats %s under TCG: %d results", target, len(res))
		}
	})

	t.Run("balloon", func(t *testing.T) {
		actual, err := c.QueryBalloon(ctx)
		if err != nil || actual != 64<<20 {
			t.Errorf("query-balloon = %d, %v; want 64 MiB", actual, err)
		}
		const path = "/machine/peripheral/balloon0"
		if err := c.SetBalloonStatsPollingInterval(ctx, path, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		var interval int
		if err := c.QOMGet(ctx, path, "guest-stats-polling-interval", &interval); err != nil || interval != 2 {
			t.Errorf("polling interval = %d, %v", interval, err)
		}
		g, err := c.BalloonGuestStats(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		// No guest driver ever reported.
		if g.FreeMemory != nil || !g.LastUpdate.IsZero() {
			t.Errorf("guest stats without a guest = %+v", g)
		}
	})

	t.Run("dirty rate", func(t *testing.T) {
		if err := c.CalcDirtyRate(ctx, 1); err != nil {
			t.Fatal(err)
		}
		var d DirtyRate
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var err error
			if d, err = c.QueryDirtyRate(ctx); err != nil {
				t.Fatal(err)
			}
			if d.Status == DirtyRateMeasured {
				break
			}
		}
		if d.Status != DirtyRateMeasured || d.RateMiBPerSecond == nil || *d.RateMiBPerSecond < 0 || d.CalcTime != 1 {
			t.Errorf("query-dirty-rate after a 1 s measurement: %+v", d)
		}
	})
	t.Run("memory-size-summary", func(t *testing.T) {
		m, err := c.QueryMemorySizeSummary(ctx)
		if err != nil || m.BaseMemory != 64<<20 {
			t.Errorf("got %+v, %v", m, err)
		}
	})

	t.Run("screendump", func(t *testing.T) {
		file := filepath.Join(vm.dir, "screen")
		if err := c.Screendump(ctx, file, ""); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("screendump is not a PNG: % x", b[:min(8, len(b))])
		}
	})

	t.Run("getfd", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		if err := c.GetFD(ctx, "pipe0", r); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFD(ctx, "pipe0"); err != nil {
			t.Errorf("closefd of a passed fd: %v", err)
		}
		err = c.CloseFD(ctx, "pipe0")
		if !HasClass(err, ClassGenericError) {
			t.Errorf("closefd of an unknown name: %v", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		err := c.Execute(ctx, "no-such-command", nil, nil)
		var qe *Error
		if !errors.As(err, &qe) || qe.Class != ClassCommandNotFound || qe.Desc == "" {
			t.Errorf("unknown command: %v", err)
		}
		if err := c.DeviceDel(ctx, "nothere"); !HasClass(err, ClassDeviceNotFound) {
			t.Errorf("device_del of a missing device: %v", err)
		}
	})

	t.Run("migrate-parameters", func(t *testing.T) {
		if err := c.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": 1 << 30}); err != nil {
			t.Error(err)
		}
		m, err := c.QueryMigrate(ctx)
		if err != nil || m.Status != "" {
			t.Errorf("query-migrate before any migration = %+v, %v", m, err)
		}
	})

	if err := c.Quit(ctx); err != nil {
		t.Fatalf("quit: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after quit")
	}
	if !errors.Is(c.Err(), ErrDisconnected) {
		t.Errorf("Err() after quit = %v", c.Err())
	}
	if _, err := c.Status(ctx); !errors.Is(err, ErrDisconnected) {
		t.Errorf("status after quit: %v", err)
	}
	select {
	case <-vm.exited:
	case <-time.After(10 * time.Second):
		t.Error("QEMU did not exit after quit")
	}
}

func TestQEMUMigrate(t *testing.T) {
	src := startQEMU(t)
	dst := startQEMU(t, "-incoming", "defer")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	for _, vm := range []*qemuVM{src, dst} {
		if err := vm.client.MigrateSetCapabilities(ctx, map[string]bool{"events": true}); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := dst.client.Status(ctx); err != nil || st.Status != StatusInMigrate {
		t.Errorf("destination status = %+v, %v", st, err)
	}
	uri := "unix:" + filepath.Join(dst.dir, "migrate.sock")
	if err := dst.client.MigrateIncoming(ctx, uri); err != nil {
		t.Fatal(err)
	}

	events, cancelEvents := src.client.Subscribe(64)
	defer cancelEvents()
	if err := src.client.Migrate(ctx, uri); err != nil {
		t.Fatal(err)
	}
	e, err := WaitEvent(ctx, events, func(e Event) bool {
		s := e.Data["status"]
		return e.Name == "MIGRATION" && (s == MigrationCompleted || s == MigrationFailed)
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.Data["status"] != MigrationCompleted {
		t.Fatalf("migration ended with %v", e.Data)
	}
	m, err := src.client.QueryMigrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != MigrationCompleted || m.RAM == nil || m.RAM.Total < 64<<20 || m.RAM.Transferred <= 0 {
		t.Errorf("query-migrate = %+v, ram %+v", m, m.RAM)
	}
	if err := src.client.MigrateCancel(ctx); err != nil {
		t.Errorf("migrate_cancel after completion: %v", err)
	}
	// The source leaves finish-migrate just after the MIGRATION event.
	for {
		st, err := src.client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == StatusPostMigrate {
			break
		}
		if st.Status != StatusFinishMigrate {
			t.Fatalf("source status = %+v, want postmigrate", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
