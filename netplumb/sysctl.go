package netplumb

import (
	"fmt"
	"os"
	"strings"
)

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// Files under /proc/sys/net belong to the namespace of the thread that opens them, so these
// run inside Do.

func (c *nsConn) readSysctl(path string) (string, error) {
	var v string
	err := c.Do(func() error {
		b, err := os.ReadFile(path)
		v = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read %s in %s: %w", path, c.path, err)
	}
	return v, nil
}

func (c *nsConn) writeSysctl(path, v string) error {
	err := c.Do(func() error { return os.WriteFile(path, []byte(v), 0o644) })
	if err != nil {
		return fmt.Errorf("write %s=%s in %s: %w", path, v, c.path, err)
	}
	return nil
}
