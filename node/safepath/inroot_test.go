package safepath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFileInRootStaysInTheRoot: links inside a container's root resolve against that root,
// whether absolute or climbing with "..", so the caller's own files are never read.
func TestReadFileInRootStaysInTheRoot(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "root")
	for _, d := range []string{"etc", "run/real"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(top, "secret"), "the caller's file")
	write(filepath.Join(root, "secret"), "the root's file")
	write(filepath.Join(root, "run/real/resolv.conf"), "nameserver 10.96.0.10\n")
	links := map[string]string{
		"etc/resolv.conf": "../run/real/resolv.conf", // as an image might ship it
		"etc/abs":         filepath.Join(top, "secret"),
		"etc/absroot":     "/secret",
		"etc/climb":       "../../../../../../secret",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}

	if b, err := ReadFileInRoot(root, "/etc/resolv.conf", 1024); err != nil || string(b) != "nameserver 10.96.0.10\n" {
		t.Fatalf("resolv.conf through its link: %q, %v", b, err)
	}
	if b, err := ReadFileInRoot(root, "etc/absroot", 1024); err != nil || string(b) != "the root's file" {
		t.Fatalf("an absolute link: %q, %v", b, err)
	}
	if b, err := ReadFileInRoot(root, "etc/climb", 1024); err != nil || string(b) != "the root's file" {
		t.Fatalf("a link climbing out: %q, %v", b, err)
	}
	// A link to the caller's path names, inside the root, nothing.
	if b, err := ReadFileInRoot(root, "etc/abs", 1024); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a link to the caller's file read %q, %v", b, err)
	}
	if b, err := ReadFileInRoot(root, "../secret", 1024); err != nil || string(b) != "the root's file" {
		t.Fatalf("a climbing path: %q, %v", b, err)
	}
}

func TestReadFileInRootRefusesWhatIsNotAFile(t *testing.T) {
	root := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFileInRoot(root, "fifo", 1024)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, err := ReadFileInRoot(root, ".", 1024); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory: %v", err)
	}

	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, 2000), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFileInRoot(root, "big", 1024)
	if !errors.Is(err, ErrTooLarge) || len(b) != 1024 {
		t.Fatalf("a file over the limit: %d bytes, %v", len(b), err)
	}
}
