package fdpass

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestSendReceive(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fds.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if err := Send(c, "tap0", w); err != nil {
			t.Error(err)
		}
		w.Close()
	}()
	c, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name, f, err := Receive(c)
	if err != nil {
		t.Fatal(err)
	}
	if name != "tap0" {
		t.Errorf("name %q", name)
	}
	// The received descriptor is the pipe's write end: writing to it reaches our reader.
	if _, err := f.Write([]byte("through")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "through" {
		t.Errorf("read %q, %v", got, err)
	}
}

func TestSendRejectsBadName(t *testing.T) {
	if err := Send(nil, "", os.Stdin); err == nil {
		t.Error("empty name accepted")
	}
}

func TestSendAllWaitsForThePeer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fds.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			name, f, err := Receive(c)
			if err != nil {
				return
			}
			got[name] = true
			f.Close()
		}
	}()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	if err := SendAll(c, map[string]*os.File{"a": r, "b": w}); err != nil {
		t.Fatal(err)
	}
	<-done
	if !got["a"] || !got["b"] {
		t.Errorf("peer got %v", got)
	}
}
