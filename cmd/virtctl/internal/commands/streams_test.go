package commands

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestConsoleRetriesOn400AndLeavesOnEscape(t *testing.T) {
	var attempts atomic.Int32
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) <= 2 {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "Unable to connect to VM because phase is Scheduling instead of Running")
			return
		}
		echoStream(w, r)
	})
	// Bytes typed before Ctrl+] in the same read still reach the VM; the rest does not.
	res := run(t, api.kubeconfig(t, "tok3n", "ns1"), strings.NewReader("echo hi\r\x1dnot sent"), "console", "tiny")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if res.stderr != "Successfully connected to tiny console. The escape sequence is ^]\n" {
		t.Errorf("stderr %q", res.stderr)
	}
	reqs := api.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 2 refused and 1 upgraded: %+v", len(reqs), reqs)
	}
	for _, r := range reqs {
		if r.Method != "GET" || r.Path != sub+"ns1/virtualmachineinstances/tiny/console" ||
			r.Subprotocol != "plain.kubevirt.io" || r.Auth != "Bearer tok3n" {
			t.Errorf("request %+v", r)
		}
	}
}

func TestConsoleEchoesThroughTheStream(t *testing.T) {
	got := make(chan string, 1)
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.TextMessage, []byte("text is ignored"))
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("qvirt# "))
		_, msg, _ := ws.ReadMessage()
		got <- string(msg)
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("42\r\n"))
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		time.Sleep(100 * time.Millisecond)
	})
	stdin, typing := io.Pipe()
	defer typing.Close()
	go func() { _, _ = typing.Write([]byte("echo $((6*7))\r")) }()
	res := run(t, api.kubeconfig(t, "", "default"), stdin, "console", "tiny")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if msg := <-got; msg != "echo $((6*7))\r" {
		t.Errorf("the VM got %q", msg)
	}
	if res.stdout != "qvirt# 42\r\n" {
		t.Errorf("stdout %q", res.stdout)
	}
	if r := api.requests()[0]; r.ClientCN != "alice" {
		t.Errorf("the websocket dial did not present the client certificate: %+v", r)
	}
}

func TestConsoleGivesUpAfterTheTimeout(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
			return
		}
		writeStatus(w, http.StatusBadRequest, "BadRequest", "Unable to connect to VM because phase is Pending instead of Running")
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "console", "tiny", "--timeout", "0")
	if res.code == 0 || res.stderr != "Timeout trying to connect to the virtual machine instance\n" {
		t.Errorf("%+v", res)
	}
}

func TestConsoleFailsAtOnceOnOtherErrors(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
			return
		}
		writeStatus(w, http.StatusNotFound, "NotFound", `virtualmachineinstance.kubevirt.io "nope" not found`)
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "console", "nope")
	want := "Can't connect to websocket (404): virtualmachineinstance.kubevirt.io \"nope\" not found\n"
	if res.code == 0 || res.stderr != want {
		t.Errorf("%+v", res)
	}
}

// start runs virtctl in the background until the test ends. It returns stdout, a stop
// function that interrupts it as Ctrl+C would, and a wait function for the exit code.
func start(t *testing.T, kubeconfig string, args ...string) (*syncBuffer, context.CancelFunc, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	var code int
	exited := make(chan struct{})
	go func() {
		code = Execute(ctx, append([]string{"--kubeconfig", kubeconfig}, args...), strings.NewReader(""), stdout, stderr)
		close(exited)
	}()
	wait := func() int {
		select {
		case <-exited:
			return code
		case <-time.After(5 * time.Second):
			t.Fatalf("virtctl %v did not stop; stderr %q", args, stderr.String())
			return -1
		}
	}
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	return stdout, cancel, wait
}

func TestPortForwardOpensAStreamPerConnection(t *testing.T) {
	for _, tc := range []struct{ target, path string }{
		{"vm/tiny", sub + "ns1/virtualmachines/tiny/portforward/"},
		{"vmi/tiny/ns2", sub + "ns2/virtualmachineinstances/tiny/portforward/"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			api := newFakeAPI(t, echoStream)
			stdout, stop, wait := start(t, api.kubeconfig(t, "", "ns1"), "port-forward", tc.target, ":80", "udp/:53")
			m := stdout.waitFor(t, regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80\nForwarding from 127\.0\.0\.1:(\d+) -> 53\n`))

			for i := range 2 {
				c, err := net.Dial("tcp", "127.0.0.1:"+m[1])
				if err != nil {
					t.Fatal(err)
				}
				msg := fmt.Sprintf("ping %d\n", i)
				_, _ = c.Write([]byte(msg))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil || line != msg {
					t.Errorf("echo %q, %v", line, err)
				}
				c.Close()
			}
			u, err := net.Dial("udp", "127.0.0.1:"+m[2])
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			_, _ = u.Write([]byte("datagram"))
			_ = u.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			if n, err := u.Read(buf); err != nil || string(buf[:n]) != "datagram" {
				t.Errorf("udp echo %q, %v", buf[:n], err)
			}

			stop()
			if code := wait(); code != 0 {
				t.Errorf("exit %d after interrupt", code)
			}
			var tcp, udp int
			for _, r := range api.requests() {
				switch r.Path {
				case tc.path + "80/tcp":
					tcp++
				case tc.path + "53/udp":
					udp++
				default:
					t.Errorf("request %+v", r)
				}
				if r.Subprotocol != "plain.kubevirt.io" || r.ClientCN != "alice" {
					t.Errorf("request %+v", r)
				}
			}
			if tcp != 2 || udp != 1 {
				t.Errorf("%d tcp and %d udp streams, want 2 and 1", tcp, udp)
			}
		})
	}
}

func TestPortForwardFailsWhenALocalPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	api := newFakeAPI(t, echoStream)
	res := run(t, api.kubeconfig(t, "", "default"), nil, "port-forward", "vm/tiny", ":80", fmt.Sprintf("%d:81", port))
	if res.code == 0 || !strings.Contains(res.stderr, fmt.Sprintf("unable to listen on tcp/127.0.0.1:%d", port)) {
		t.Errorf("%+v", res)
	}
}

func TestVNCProxyOnlyServesOneViewerAtATime(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("RFB 003.008\n"))
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	})
	stdout, stop, wait := start(t, api.kubeconfig(t, "", "default"), "vnc", "tiny", "--proxy-only", "--preserve-session")
	m := stdout.waitFor(t, regexp.MustCompile(`^\{"port":(\d+)\}\n$`))
	for range 2 {
		c, err := net.Dial("tcp", "127.0.0.1:"+m[1])
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		greeting := make([]byte, 12)
		if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "RFB 003.008\n" {
			t.Errorf("greeting %q, %v", greeting, err)
		}
		c.Close()
	}
	stop()
	if code := wait(); code != 0 {
		t.Errorf("exit %d", code)
	}
	reqs := api.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d streams, want one per viewer: %+v", len(reqs), reqs)
	}
	for _, r := range reqs {
		if r.Path != sub+"default/virtualmachineinstances/tiny/vnc" || r.Query != "preserveSession=true" || r.Subprotocol != "plain.kubevirt.io" {
			t.Errorf("request %+v", r)
		}
	}
}

func TestVNCReportsAnUnreachableVMI(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
			return
		}
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "a VNC session is already open")
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "vnc", "tiny", "--proxy-only")
	if res.code == 0 || res.stderr != "Can't access VMI tiny: Can't connect to websocket (503): a VNC session is already open\n" {
		t.Errorf("%+v", res)
	}
}

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		arg, proto string
		want       forwardedPort
		err        bool
	}{
		{"8080", "tcp", forwardedPort{8080, 8080, "tcp"}, false},
		{"18080:80", "tcp", forwardedPort{18080, 80, "tcp"}, false},
		{":80", "tcp", forwardedPort{0, 80, "tcp"}, false},
		{"udp/5353:53", "tcp", forwardedPort{5353, 53, "udp"}, false},
		{"53", "udp", forwardedPort{53, 53, "udp"}, false},
		{"TCP/22", "udp", forwardedPort{22, 22, "tcp"}, false},
		{"sctp/22", "tcp", forwardedPort{}, true},
		{"0", "tcp", forwardedPort{}, true},
		{"70000", "tcp", forwardedPort{}, true},
		{"1:2:3", "tcp", forwardedPort{}, true},
	} {
		got, err := parsePort(tc.arg, tc.proto)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("parsePort(%q, %q) = %+v, %v", tc.arg, tc.proto, got, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		arg                      string
		resource, name, ns, fail string
	}{
		{"vm/tiny", "virtualmachines", "tiny", "", ""},
		{"VMI/tiny/ns2", "virtualmachineinstances", "tiny", "ns2", ""},
		{"virtualmachines/a", "virtualmachines", "a", "", ""},
		{"tiny", "", "", "", "target must contain type and name separated by '/'"},
		{"pod/tiny", "", "", "", "unsupported resource type 'pod'"},
		{"vm/", "", "", "", "name cannot be empty"},
		{"vm/a/", "", "", "", "namespace cannot be empty"},
		{"vm/a/b/c", "", "", "", "target is not valid with more than two '/'"},
	} {
		resource, name, ns, err := parseTarget(tc.arg)
		if tc.fail != "" {
			if err == nil || err.Error() != tc.fail {
				t.Errorf("parseTarget(%q) error %v, want %q", tc.arg, err, tc.fail)
			}
			continue
		}
		if err != nil || resource != tc.resource || name != tc.name || ns != tc.ns {
			t.Errorf("parseTarget(%q) = %s %s %s %v", tc.arg, resource, name, ns, err)
		}
	}
}
