// Package fdpass moves open file descriptors between processes over a unix socket
// (SCM_RIGHTS), each labelled with a name. The node agent uses it to hand tap devices it opened
// to the launcher, which never needs the privilege to create them.
package fdpass

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// maxName bounds the label so a message always fits one read.
const maxName = 255

// Send passes f to the peer under name.
func Send(conn *net.UnixConn, name string, f *os.File) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("fdpass: name must be 1..%d bytes, got %d", maxName, len(name))
	}
	rights := unix.UnixRights(int(f.Fd()))
	n, oobn, err := conn.WriteMsgUnix([]byte(name), rights, nil)
	if err != nil {
		return fmt.Errorf("fdpass: send %s: %w", name, err)
	}
	if n != len(name) || oobn != len(rights) {
		return fmt.Errorf("fdpass: short write sending %s", name)
	}
	return nil
}

// Receive reads one labelled descriptor. The returned file is owned by the caller.
func Receive(conn *net.UnixConn) (string, *os.File, error) {
	buf := make([]byte, maxName)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return "", nil, err
	}
	if n == 0 && oobn == 0 {
		return "", nil, io.EOF
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return "", nil, errors.New("fdpass: control message truncated")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return "", nil, fmt.Errorf("fdpass: %w", err)
	}
	if len(msgs) != 1 {
		return "", nil, fmt.Errorf("fdpass: want one control message, got %d", len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return "", nil, fmt.Errorf("fdpass: %w", err)
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return "", nil, fmt.Errorf("fdpass: want one descriptor, got %d", len(fds))
	}
	name := string(buf[:n])
	if name == "" {
		unix.Close(fds[0])
		return "", nil, errors.New("fdpass: descriptor without a name")
	}
	unix.CloseOnExec(fds[0])
	return name, os.NewFile(uintptr(fds[0]), name), nil
}

// SendAll passes every descriptor, then waits until the peer has taken them all (it closes
// the connection after reading to the end), so the caller may rely on them being there.
func SendAll(conn *net.UnixConn, files map[string]*os.File) error {
	for name, f := range files {
		if err := Send(conn, name, f); err != nil {
			return err
		}
	}
	if err := conn.CloseWrite(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return fmt.Errorf("fdpass: waiting for the peer: %w", err)
	}
	return nil
}
