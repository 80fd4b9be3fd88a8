package guestagent

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeAgent answers on a unix socket as qemu-ga does, after first writing stale data: half a
// reply of an earlier session, then a stale sync answer with another id.
func fakeAgent(t *testing.T, answer func(cmd string) string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qga.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = conn.Write([]byte(`{"return": {"host-na` + "\n" + "\xff" + `{"return": 12345}` + "\n"))
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				Execute   string `json:"execute"`
				Arguments struct {
					ID int64 `json:"id"`
				} `json:"arguments"`
			}
			if json.Unmarshal(line, &req) != nil {
				continue
			}
			if req.Execute == "guest-sync-delimited" {
				b, _ := json.Marshal(map[string]int64{"return": req.Arguments.ID})
				_, _ = conn.Write(append(append([]byte{0xff}, b...), '\n'))
				continue
			}
			_, _ = conn.Write([]byte(answer(req.Execute) + "\n"))
		}
	}()
	return sock
}

func TestDialDropsStaleRepliesAndInfoReadsTheGuest(t *testing.T) {
	sock := fakeAgent(t, func(cmd string) string {
		switch cmd {
		case "guest-info":
			return `{"return": {"version": "7.2.22", "supported_commands": [{"name": "guest-ping", "enabled": true}, {"name": "guest-exec", "enabled": false}]}}`
		case "guest-get-osinfo":
			return `{"return": {"id": "qvirt-tiny", "version-id": "1", "kernel-release": "6.1", "machine": "x86_64"}}`
		case "guest-get-host-name":
			return `{"return": {"host-name": "web"}}`
		case "guest-network-get-interfaces":
			return `{"return": [{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1"}]}, {"name": "eth0", "hardware-address": "02:00:00:00:00:01", "ip-addresses": [{"ip-address-type": "ipv6", "ip-address": "fe80::1"}, {"ip-address-type": "ipv4", "ip-address": "10.0.2.2"}]}]}`
		case "guest-get-users":
			return `{"error": {"class": "GenericError", "desc": "no utmp"}}`
		case "guest-get-fsinfo":
			return `{"return": [{"name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 10, "total-bytes": 100}]}`
		}
		return `{"error": {"class": "CommandNotFound", "desc": "unknown"}}`
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Connected || info.Version != "7.2.22" || len(info.SupportedCommands) != 1 || info.SupportedCommands[0] != "guest-ping" {
		t.Errorf("agent: %v", info)
	}
	if info.Os.GetId() != "qvirt-tiny" || info.Os.GetKernelRelease() != "6.1" || info.Hostname != "web" {
		t.Errorf("os and host: %v %q", info.Os, info.Hostname)
	}
	if len(info.Interfaces) != 1 || info.Interfaces[0].Name != "eth0" || len(info.Interfaces[0].Ips) != 2 || info.Interfaces[0].Ips[0] != "10.0.2.2" {
		t.Errorf("interfaces (no loopback, IPv4 first): %v", info.Interfaces)
	}
	if len(info.Users) != 0 {
		t.Errorf("users from a guest that cannot list them: %v", info.Users)
	}
	if len(info.Filesystems) != 1 || info.Filesystems[0].MountPoint != "/" || info.Filesystems[0].TotalBytes != 100 {
		t.Errorf("filesystems: %v", info.Filesystems)
	}
	if err := c.Execute(ctx, "guest-unknown", nil, nil); !IsCommandNotFound(err) {
		t.Errorf("unknown command: %v", err)
	}
}

func TestDialTimesOutWithoutAnAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qga.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err == nil {
			defer conn.Close()
			time.Sleep(5 * time.Second) // QEMU's end of a channel no agent reads
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, sock); err == nil {
		t.Fatal("Dial succeeded with no agent answering")
	}
}
