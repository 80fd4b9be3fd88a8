package ociimages

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// maxLinks bounds the symlinks followed for one path, as the kernel does (ELOOP).
const maxLinks = 40

// hostTree collects host files at their own paths in the image, with the symlinks on the way to
// them kept as symlinks, and the shared libraries every dynamic ELF file among them needs.
type hostTree struct {
	entries map[string]File // by path in the image
	lddDone map[string]bool // resolved paths whose libraries are in
}

func newHostTree() *hostTree {
	return &hostTree{entries: map[string]File{}, lddDone: map[string]bool{}}
}

// Add includes the host paths, each with the libraries it needs when it is a dynamic ELF file.
// A path naming a directory includes the directory alone, with its permissions.
func (t *hostTree) Add(paths ...string) error {
	for _, p := range paths {
		resolved, err := t.addPath(p)
		if err != nil {
			return err
		}
		if err := t.addLibraries(resolved); err != nil {
			return err
		}
	}
	return nil
}

// Resolve returns the path p leads to through the symlinks in the tree.
func (t *hostTree) Resolve(p string) string {
	p = path.Clean(p)
	for range maxLinks {
		next, changed := t.resolveOnce(p)
		if !changed {
			return p
		}
		p = next
	}
	return p
}

func (t *hostTree) resolveOnce(p string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, c := range parts {
		next := path.Join(cur, c)
		if f, ok := t.entries[next]; ok && f.Mode&os.ModeSymlink != 0 {
			return path.Join(linkTarget(cur, f.Link), path.Join(parts[i+1:]...)), true
		}
		cur = next
	}
	return p, false
}

// Files returns the collected entries in path order.
func (t *hostTree) Files() []File {
	out := make([]File, 0, len(t.entries))
	for _, f := range t.entries {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// addPath walks p from the root, recording each symlink met and going on from its target, and
// returns the path of the file or directory p leads to.
func (t *hostTree) addPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("host path %q is not absolute", p)
	}
	orig := p
	for range maxLinks {
		next, err := t.walk(path.Clean(p))
		if err != nil {
			return "", fmt.Errorf("%s: %w", orig, err)
		}
		if next == "" {
			return path.Clean(p), nil
		}
		p = next
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", orig)
}

// walk records p's first symlink and returns the path it leads to, or records the file or
// directory p names and returns "".
func (t *hostTree) walk(p string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, c := range parts {
		next := path.Join(cur, c)
		st, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		last := i == len(parts)-1
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			t.entries[next] = Symlink(next, target)
			return path.Join(linkTarget(cur, target), path.Join(parts[i+1:]...)), nil
		case !last && !st.IsDir():
			return "", fmt.Errorf("%s is not a directory", next)
		case last && st.IsDir():
			t.entries[next] = Dir(next, st.Mode().Perm()|st.Mode()&os.ModeSticky)
		case last && st.Mode().IsRegular():
			t.entries[next] = File{Path: next, Source: next, Mode: st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)}
		case last:
			return "", fmt.Errorf("%s is neither a file, a directory nor a symlink", next)
		}
		cur = next
	}
	return "", nil
}

// linkTarget is where a symlink in dir pointing to target leads.
func linkTarget(dir, target string) string {
	if path.IsAbs(target) {
		return path.Clean(target)
	}
	return path.Join(dir, target)
}

// addLibraries adds what ldd lists for p, when p is a dynamic x86-64 ELF file. ldd's list is the
// whole closure (the interpreter included), so the libraries themselves need no second look.
func (t *hostTree) addLibraries(p string) error {
	if t.lddDone[p] {
		return nil
	}
	t.lddDone[p] = true
	dynamic, err := isDynamicELF(p)
	if err != nil || !dynamic {
		return err
	}
	libs, err := ldd(p)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		resolved, err := t.addPath(lib)
		if err != nil {
			return fmt.Errorf("library of %s: %w", p, err)
		}
		t.lddDone[resolved] = true
	}
	return nil
}

// isDynamicELF reports whether p is an x86-64 ELF file that loads shared libraries. Firmware and
// files of other machines are data here.
func isDynamicELF(p string) (bool, error) {
	f, err := elf.Open(p)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return false, nil
		}
		// Too short to hold an ELF header.
		if st, serr := os.Stat(p); serr == nil && (st.IsDir() || st.Size() < 64) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return false, nil
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_DYNAMIC || prog.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// ldd lists the absolute paths of the shared libraries and the interpreter p loads.
func ldd(p string) ([]string, error) {
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("ldd %s: %v: %s", p, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("ldd %s: %w", p, err)
	}
	return parseLdd(p, string(out))
}

// parseLdd reads lines like "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" and
// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
func parseLdd(p, out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, "statically linked") {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("%s: a library is missing: %s", p, line)
		}
		name, rest, arrow := strings.Cut(line, "=>")
		if !arrow {
			rest = name
		}
		fields := strings.Fields(rest)
		if len(fields) > 0 && strings.HasPrefix(fields[0], "/") {
			libs = append(libs, fields[0])
		}
	}
	return libs, nil
}
