package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAddFDPassesTheFile(t *testing.T) {
	s := newFakeServer(t)
	type got struct {
		args  string
		files int
	}
	seen := make(chan got, 1)
	s.handle("add-fd", func(fc *fakeConn, req fakeRequest) {
		seen <- got{string(req.Arguments), len(req.Files)}
		for _, f := range req.Files {
			f.Close()
		}
		fc.reply(req, map[string]any{"fdset-id": 3, "fd": 17})
	})
	c := s.dial(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := c.AddFD(t.Context(), f, "disk-a")
	if err != nil {
		t.Fatal(err)
	}
	if info.FDSetID != 3 || info.FD != 17 {
		t.Errorf("add-fd answered %+v", info)
	}
	if g := <-seen; g.args != `{"opaque":"disk-a"}` || g.files != 1 {
		t.Errorf("add-fd got arguments %s with %d files", g.args, g.files)
	}
}

// TestDeviceDelWaitSeesAnEarlyEvent: QEMU may emit DEVICE_DELETED before its reply to
// device_del (a SCSI disk goes at once); the wait must not miss it, nor take another device's.
func TestDeviceDelWaitSeesAnEarlyEvent(t *testing.T) {
	s := newFakeServer(t)
	s.handle("device_del", func(fc *fakeConn, req fakeRequest) {
		fc.event("DEVICE_DELETED", map[string]any{"path": "/machine/peripheral/disk0/virtio-backend"})
		fc.event("DEVICE_DELETED", map[string]any{"device": "other", "path": "/machine/peripheral/other"})
		fc.event("DEVICE_DELETED", map[string]any{"device": "disk0", "path": "/machine/peripheral/disk0"})
		fc.reply(req, map[string]any{})
	})
	c := s.dial(t)
	if err := c.DeviceDelWait(within(t, 5*time.Second), "disk0"); err != nil {
		t.Fatal(err)
	}
}

func TestDeviceDelWaitTimesOut(t *testing.T) {
	s := newFakeServer(t)
	s.reply("device_del", map[string]any{})
	c := s.dial(t)
	err := c.DeviceDelWait(within(t, 200*time.Millisecond), "pci-disk")
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("a device never released: %v, want a timeout", err)
	}
}

func TestDumpArgumentsAndCompletion(t *testing.T) {
	s := newFakeServer(t)
	args := make(chan string, 1)
	s.handle("dump-guest-memory", func(fc *fakeConn, req fakeRequest) {
		args <- string(req.Arguments)
		fc.reply(req, map[string]any{})
	})
	s.reply("query-dump", json.RawMessage(`{"status":"active","completed":10,"total":30}`))
	c := s.dial(t)
	if err := c.DumpGuestMemory(t.Context(), "fd:dump", DumpELF); err != nil {
		t.Fatal(err)
	}
	if got, want := <-args, `{"detach":true,"format":"elf","paging":false,"protocol":"fd:dump"}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
	if d, err := c.QueryDump(t.Context()); err != nil || d != (DumpInfo{Status: DumpActive, Completed: 10, Total: 30}) {
		t.Errorf("query-dump = %+v, %v", d, err)
	}
	info, msg, ok := DumpCompletedResult(Event{Name: "DUMP_COMPLETED", Data: map[string]any{
		"result": map[string]any{"status": "failed", "completed": float64(5), "total": float64(30)}, "error": "disk full"}})
	if !ok || info != (DumpInfo{Status: DumpFailed, Completed: 5, Total: 30}) || msg != "disk full" {
		t.Errorf("DUMP_COMPLETED decoded as %+v %q %v", info, msg, ok)
	}
	if _, _, ok := DumpCompletedResult(Event{Name: "STOP"}); ok {
		t.Error("a STOP event decoded as a dump's end")
	}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
