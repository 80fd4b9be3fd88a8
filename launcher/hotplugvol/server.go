package hotplugvol

import (
	"encoding/json"
	"errors"
	"net"
	"os"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// Serve answers requests on l until it is closed, each connection's requests in turn.
func Serve(l *net.UnixListener, v Volume, log logr.Logger) error {
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer conn.Close()
			for serveOne(conn, v, log) {
			}
		}()
	}
}

// serveOne answers one request; false ends the connection.
func serveOne(conn *net.UnixConn, v Volume, log logr.Logger) bool {
	buf := make([]byte, maxMessage)
	n, err := conn.Read(buf)
	if err != nil || n == 0 {
		return false
	}
	var req Request
	var resp Response
	var f *os.File
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else if f, resp.Block, err = v.open(req); err != nil {
		resp.Error = err.Error()
	}
	b, _ := json.Marshal(resp)
	var oob []byte
	if f != nil {
		defer f.Close()
		oob = unix.UnixRights(int(f.Fd()))
		log.Info("handing over the hotplugged volume", "file", req.File, "block", resp.Block)
	} else {
		log.Info("hotplugged volume request refused", "file", req.File, "reason", resp.Error)
	}
	if _, _, err := conn.WriteMsgUnix(b, oob, nil); err != nil {
		return false
	}
	return true
}

// Listen makes the socket at path, replacing a stale one.
func Listen(path string) (*net.UnixListener, error) {
	_ = os.Remove(path)
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}
