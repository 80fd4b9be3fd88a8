package ociimages

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// entry is a File checked and completed: clean path without the leading slash, kind and
// permissions settled.
type entry struct {
	name string // "usr/bin/qemu-img"; directories end without a slash here
	File
}

func (e entry) kind() os.FileMode { return e.Mode.Type() & (os.ModeDir | os.ModeSymlink) }

// same reports whether two entries for one path would write the same thing.
func (e entry) same(o entry) bool {
	return e.Mode == o.Mode && e.Source == o.Source && bytes.Equal(e.Content, o.Content) &&
		e.Link == o.Link && e.UID == o.UID && e.GID == o.GID
}

// normalizeLayers checks every layer and returns its entries in path order, with the directories
// above them. An entry identical to one of a lower layer is left out; a path of two kinds, or one
// under a symlink (which the runtime would follow out of the intended place), is an error.
func normalizeLayers(layers [][]File) ([][]entry, error) {
	below := map[string]entry{}
	out := make([][]entry, len(layers))
	for i, files := range layers {
		entries, err := normalize(files, below)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		for _, e := range entries {
			below[e.name] = e
		}
		out[i] = entries
	}
	return out, nil
}

func normalize(files []File, below map[string]entry) ([]entry, error) {
	byName := map[string]entry{}
	for _, f := range files {
		e, err := complete(f)
		if err != nil {
			return nil, err
		}
		if old, dup := byName[e.name]; dup && !old.same(e) {
			return nil, fmt.Errorf("%s given twice, differently", f.Path)
		}
		byName[e.name] = e
	}
	for name, e := range byName {
		if old, ok := below[name]; ok && old.same(e) {
			delete(byName, name)
		}
	}
	// The directories above each entry, where no layer names them.
	for name := range byName {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			e, ok := byName[d]
			if !ok {
				e, ok = below[d]
			}
			if ok && e.kind() != os.ModeDir {
				return nil, fmt.Errorf("/%s is under /%s, which is not a directory", name, d)
			}
			if !ok {
				byName[d] = entry{name: d, File: Dir("/"+d, 0o755)}
			}
		}
	}
	out := make([]entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// complete checks f and fills in what it leaves to defaults.
func complete(f File) (entry, error) {
	if !strings.HasPrefix(f.Path, "/") {
		return entry{}, fmt.Errorf("path %q in the image is not absolute", f.Path)
	}
	name := strings.TrimPrefix(path.Clean(f.Path), "/")
	if name == "" {
		return entry{}, fmt.Errorf("path %q names the root", f.Path)
	}
	e := entry{name: name, File: f}
	e.Path = "/" + name
	switch e.kind() {
	case os.ModeDir:
		if e.Source != "" || e.Content != nil || e.Link != "" {
			return entry{}, fmt.Errorf("directory %s has content", f.Path)
		}
		if e.Mode.Perm() == 0 {
			e.Mode |= 0o755
		}
	case os.ModeSymlink:
		if e.Link == "" {
			return entry{}, fmt.Errorf("symlink %s has no target", f.Path)
		}
		e.Mode = os.ModeSymlink | 0o777
	case 0:
		if e.Mode.Type() != 0 {
			return entry{}, fmt.Errorf("%s: unsupported file type %v", f.Path, e.Mode.Type())
		}
		if (e.Source == "") == (e.Content == nil) {
			return entry{}, fmt.Errorf("file %s needs either a Source or Content", f.Path)
		}
		if e.Source != "" && e.Mode.Perm() == 0 {
			st, err := os.Stat(e.Source)
			if err != nil {
				return entry{}, err
			}
			if !st.Mode().IsRegular() {
				return entry{}, fmt.Errorf("%s (for %s) is not a regular file", e.Source, f.Path)
			}
			e.Mode |= st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
		}
	}
	return e, nil
}

// streamTar writes the entries as an uncompressed tar from a goroutine.
func streamTar(entries []entry) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, entries)) }()
	return pr
}

func writeTar(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, e entry) error {
	hdr := &tar.Header{
		Name:    e.name,
		Mode:    tarMode(e.Mode),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	switch e.kind() {
	case os.ModeDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case os.ModeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Link
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if e.Content != nil {
		hdr.Size = int64(len(e.Content))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.Content)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil {
		return err
	} else if n != hdr.Size {
		return fmt.Errorf("%s changed while being read", e.Source)
	}
	return nil
}

// tarMode is the tar header's mode field for m.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
