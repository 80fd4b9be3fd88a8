package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// onDisk is the serial log as a reader wants it: serial0.log.1, then serial0.log.
func onDisk(t *testing.T, path string) (older, current []byte) {
	t.Helper()
	older, err := os.ReadFile(path + ".1")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	current, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return older, current
}

// checkCapped checks that at most two files of max bytes are left and that they hold the
// newest output: the end of what was written, in order.
func checkCapped(t *testing.T, path string, max int64, written []byte) {
	t.Helper()
	older, current := onDisk(t, path)
	if int64(len(current)) > max || int64(len(older)) > max {
		t.Errorf("files of %d and %d bytes, want at most %d each", len(older), len(current), max)
	}
	kept := append(append([]byte(nil), older...), current...)
	if !bytes.HasSuffix(written, kept) {
		t.Errorf("the %d bytes on disk are not the end of what was written", len(kept))
	}
	if int64(len(kept)) < max && int64(len(written)) > 2*max {
		t.Errorf("only %d bytes kept of %d written, want at least %d", len(kept), len(written), max)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range ents {
		if n := e.Name(); n != filepath.Base(path) && n != filepath.Base(path)+".1" && strings.HasPrefix(n, filepath.Base(path)) {
			t.Errorf("unexpected file %s", n)
		}
	}
}

// lines is n bytes of numbered lines, so that a misplaced chunk shows.
func lines(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %07d of the guest's console\n", i)
	}
	return b.Bytes()[:n]
}

func TestRotatingLogKeepsAtMostTwoFiles(t *testing.T) {
	const max = 1 << 20
	path := filepath.Join(t.TempDir(), "serial0.log")
	l, err := openRotatingLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	data := lines(3<<20 + 12345)
	// Chunks of every size, one larger than a whole file.
	for rest, i := data, 1; len(rest) > 0; i++ {
		n := min(len(rest), i*i*97)
		if i == 20 {
			n = min(len(rest), max+4096)
		}
		if _, err := l.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkCapped(t, path, max, data)
}

func TestRotatingLogContinuesAnEarlierLog(t *testing.T) {
	const max = 1000
	path := filepath.Join(t.TempDir(), "serial0.log")
	earlier := lines(990)
	if err := os.WriteFile(path, earlier, 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := openRotatingLog(path, max)
	if err != nil {
		t.Fatal(err)
	}
	more := lines(30)
	if _, err := l.Write(more); err != nil {
		t.Fatal(err)
	}
	l.Close()
	older, current := onDisk(t, path)
	if len(older) != max || len(current) != 20 || !bytes.Equal(append(older, current...), append(earlier, more...)) {
		t.Fatalf("after 990+30 bytes: %d and %d bytes on disk", len(older), len(current))
	}
}

type failingWriter struct{ calls int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.calls++
	return 0, errors.New("no space left on device")
}

func TestSerialLogCopyDrainsWhenTheFileFails(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &failingWriter{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copySerialLog(r, out, logr.Discard())
	}()
	// Far more than a pipe holds: QEMU's writes must not block on a file that cannot be written.
	finished := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 8<<20))
		w.Close()
		finished <- err
	}()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer blocked: the copy stopped reading when the file failed")
	}
	<-done
	if out.calls < 2 {
		t.Errorf("the copy gave up after %d failed writes, want it to keep trying", out.calls)
	}
}

// TestSerialLogOfAChattyGuestIsCapped boots the guest, has it print more than three files' worth
// on its console, and checks what QEMU logged through the launcher's pipe. The files are capped
// at a quarter of the default so that the guest, under emulation, is done in seconds.
func TestSerialLogOfAChattyGuestIsCapped(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	const capped = SerialLogMax / 4
	v := New(Config{Dir: filepath.Join(t.TempDir(), "vm"), SerialLogMax: capped})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := v.Start(ctx, guestSpec(g, "chatty")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Kill(context.Background()) })
	con := testenv.DialConsole(t, v.Layout().SerialSocket())
	if err := con.WaitFor(within(t, 90*time.Second), testenv.Prompt); err != nil {
		t.Fatal(err)
	}
	const total = 3*capped + capped/2
	t0 := time.Now()
	run(t, con, fmt.Sprintf("yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxy | head -c %d; echo; echo chatty-$((6*7))", total), "chatty-42")
	t.Logf("the guest printed %d bytes in %s", total, time.Since(t0).Round(time.Millisecond))
	path := v.Layout().SerialLog()
	// The copy runs behind QEMU, far behind on a loaded machine: wait until the marker is in the
	// file.
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, current := onDisk(t, path)
		if bytes.Contains(current, []byte("chatty-42")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the end of the guest's output never reached serial0.log")
		}
	}
	older, current := onDisk(t, path)
	t.Logf("on disk: serial0.log.1 %d bytes, serial0.log %d bytes", len(older), len(current))
	if len(older) > capped || len(current) > capped {
		t.Errorf("files of %d and %d bytes, want at most %d each", len(older), len(current), capped)
	}
	if len(older) < capped/2 {
		t.Errorf("serial0.log.1 has %d bytes after more than three files' worth of output", len(older))
	}
	if bytes.Contains(current, []byte(testenv.MarkerBooted)) || bytes.Contains(older, []byte(testenv.MarkerBooted)) {
		t.Error("the oldest output (the boot) is still on disk")
	}
	// The newest output is last. (Not compared byte for byte with the console's: QEMU logs a
	// byte twice now and then when the console's client is slow.)
	if end := current[max(0, len(current)-64):]; !bytes.Contains(end, []byte("chatty-42\r\n")) {
		t.Errorf("serial0.log ends with %q, not the guest's last line", end)
	}
	if !bytes.HasPrefix(older, []byte("0123456789")) && !bytes.Contains(older[:200], []byte("\n0123456789")) {
		t.Errorf("serial0.log.1 does not hold the guest's output: %q", older[:min(200, len(older))])
	}
}
