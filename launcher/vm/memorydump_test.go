package vm

import (
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// TestDumpMemoryWritesAnELFCore dumps a running 64 MiB guest into a file the test opened: the
// dump completes with an ELF core at least as large as the guest's memory, and the guest runs
// afterwards, never reported paused.
func TestDumpMemoryWritesAnELFCore(t *testing.T) {
	testenv.RequireQEMU(t)
	v := startBareVM(t, bareSpec("memdump"), Config{})
	ctx := within(t, time.Minute)
	events, cancel := v.Subscribe()
	defer cancel()

	path := filepath.Join(t.TempDir(), "memory.dump")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := v.DumpMemory(ctx, "dump-1", f); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the launcher's copy of the descriptor is open: %v", err)
	}
	var m *launcherapi.MemoryDumpStatus
	for m = v.Status().MemoryDump; m.GetState() == "active"; m = v.Status().MemoryDump {
		if time.Since(t0) > 50*time.Second {
			t.Fatalf("the dump is still active: %v", m)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(t0)
	t.Logf("64 MiB dumped in %v (%v from start to end in the status): %v", took, time.Duration(m.EndUnixNano-m.StartUnixNano), m)
	if m.State != "completed" || m.Message != "" || m.TotalBytes < 64<<20 || m.WrittenBytes != m.TotalBytes || m.EndUnixNano < m.StartUnixNano {
		t.Fatalf("dump status %v", m)
	}

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	core, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	head := make([]byte, 4)
	if r, err := os.Open(path); err == nil {
		_, _ = r.Read(head)
		r.Close()
	}
	if string(head) != "\x7fELF" || core.Type != elf.ET_CORE || st.Size() < 64<<20 {
		t.Errorf("dump: magic %q, type %v, %d bytes", head, core.Type, st.Size())
	}

	// QEMU resumes the guest it stopped for the dump.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := v.QMPStatus(ctx)
		if err == nil && s == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("QMP status after the dump %q, %v", s, err)
		}
	}
	if st := v.Status(); st.State != launcherapi.State_STATE_RUNNING {
		t.Errorf("state after the dump %v", st.State)
	}
	for {
		select {
		case ev := <-events:
			if ev.State != launcherapi.State_STATE_RUNNING {
				t.Errorf("event %v during the dump", ev)
			}
			continue
		default:
		}
		break
	}
}

// TestDumpMemoryIntoASlowReader: while QEMU waits to write the dump (into a pipe nobody reads
// yet) the dump is active, its progress shows, a second dump is refused, and the VM counts as
// running though QEMU holds the guest stopped; once read, the dump completes and the guest
// runs again.
func TestDumpMemoryIntoASlowReader(t *testing.T) {
	testenv.RequireQEMU(t)
	v := startBareVM(t, bareSpec("memdump-pipe"), Config{})
	ctx := within(t, time.Minute)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := v.DumpMemory(ctx, "slow", w); err != nil {
		t.Fatal(err)
	}
	var m *launcherapi.MemoryDumpStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m = v.Status().MemoryDump
		if m.GetTotalBytes() > 0 || time.Now().After(deadline) {
			break
		}
	}
	if m.GetState() != "active" || m.Id != "slow" || m.TotalBytes < 64<<20 || m.WrittenBytes >= m.TotalBytes {
		t.Errorf("the blocked dump: %v", m)
	}
	second, err := os.Create(filepath.Join(t.TempDir(), "second.dump"))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.DumpMemory(ctx, "second", second); !errors.Is(err, ErrDumpInProgress) {
		t.Errorf("a second dump while one runs: %v", err)
	}
	if _, err := second.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the refused dump's descriptor is open: %v", err)
	}
	qs, _ := v.QMPStatus(ctx)
	if st := v.Status(); st.State != launcherapi.State_STATE_RUNNING {
		t.Errorf("state during the dump %v (QEMU: %s)", st.State, qs)
	}
	t.Logf("QEMU's run state during the dump: %s", qs)

	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, r)
		read <- n
	}()
	for m = v.Status().MemoryDump; m.GetState() == "active"; m = v.Status().MemoryDump {
		if ctx.Err() != nil {
			t.Fatalf("the dump did not end: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m.State != "completed" || m.WrittenBytes != m.TotalBytes {
		t.Errorf("the dump ended %v", m)
	}
	// QEMU closes its end when the dump ends.
	select {
	case n := <-read:
		if n < int64(m.TotalBytes) {
			t.Errorf("read %d bytes of a %d-byte dump", n, m.TotalBytes)
		}
	case <-time.After(10 * time.Second):
		t.Error("QEMU keeps the dump's pipe open")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s, err := v.QMPStatus(ctx); err == nil && s == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest does not run after the dump")
		}
	}
}
