// Package hotplugvol is the protocol between an attachment pod, which holds a hotplugged claim
// on the VM's node, and the node agent, which hands the claim's disk to QEMU. The attachment
// pod's process opens the file itself, as the tenant's user, and answers each request with the
// open descriptor (SCM_RIGHTS): the node agent never opens a path the tenant controls, and the
// launcher pod's mounts never change.
package hotplugvol

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Request asks for one descriptor of the volume, opened read-write.
type Request struct {
	// File names a file in a Filesystem volume ("disk.img", a memory dump); empty for a Block
	// volume, whose device is opened.
	File string `json:"file,omitempty"`
	// CreateBytes creates a missing File, sparse, at this size (a new claim's disk.img).
	CreateBytes uint64 `json:"createBytes,omitempty"`
	// NewFile creates File, which must not exist yet (a memory dump).
	NewFile bool `json:"newFile,omitempty"`
}

// Response comes with the descriptor, unless Error says why there is none.
type Response struct {
	Error string `json:"error,omitempty"`
	// Block says the descriptor is a block device.
	Block bool `json:"block,omitempty"`
}

// maxMessage bounds one request or response; both are small JSON objects.
const maxMessage = 4096

// Open asks the attachment pod behind conn for a descriptor. The file is the caller's.
func Open(conn *net.UnixConn, req Request) (*os.File, bool, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, false, fmt.Errorf("hotplug volume request: %w", err)
	}
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, false, fmt.Errorf("hotplug volume response: %w", err)
	}
	fds, err := rights(oob[:oobn])
	if err != nil {
		return nil, false, err
	}
	var resp Response
	if err := json.Unmarshal(buf[:n], &resp); err != nil {
		closeAll(fds)
		return nil, false, fmt.Errorf("hotplug volume response: %w", err)
	}
	if resp.Error != "" {
		closeAll(fds)
		return nil, false, errors.New(resp.Error)
	}
	if len(fds) != 1 {
		closeAll(fds)
		return nil, false, fmt.Errorf("hotplug volume response carries %d descriptors, want 1", len(fds))
	}
	return os.NewFile(uintptr(fds[0]), "hotplug-volume"), resp.Block, nil
}

func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Volume is the claim as the attachment pod sees it: a directory (Filesystem) or a device.
type Volume struct {
	Path string
}

// open serves one request.
func (v Volume) open(req Request) (*os.File, bool, error) {
	st, err := os.Stat(v.Path)
	if err != nil {
		return nil, false, err
	}
	if !st.IsDir() {
		if req.File != "" {
			return nil, false, fmt.Errorf("the volume is a block device; no file %q in it", req.File)
		}
		f, err := os.OpenFile(v.Path, os.O_RDWR, 0)
		return f, true, err
	}
	name := req.File
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." || strings.ContainsRune(name, 0) {
		return nil, false, fmt.Errorf("file %q: want a plain file name in the volume", name)
	}
	p := filepath.Join(v.Path, name)
	switch {
	case req.NewFile:
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o660)
		return f, false, err
	case req.CreateBytes > 0:
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o660)
		if err != nil {
			return nil, false, err
		}
		if err := sizeNew(f, int64(req.CreateBytes)); err != nil {
			f.Close()
			return nil, false, fmt.Errorf("creating %s: %w", name, err)
		}
		return f, false, nil
	default:
		f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW, 0)
		return f, false, err
	}
}

// sizeNew gives a file just created its size; an existing image is left as it is.
func sizeNew(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > 0 {
		return nil
	}
	return f.Truncate(size)
}
