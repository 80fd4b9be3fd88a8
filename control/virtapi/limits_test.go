package virtapi

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// shortLimits are virt-api's defaults with limits short enough for tests to see them act.
func shortLimits() httplimit.Limits {
	l := DefaultLimits()
	l.ReadHeaderTimeout = 300 * time.Millisecond
	l.StreamWriteTimeout = 300 * time.Millisecond
	l.MaxInFlight = 1
	return l
}

func limitedEnv(t *testing.T) *env {
	return newEnv(t, envOptions{limited: true, limits: shortLimits(), maxWebhookBody: 64 << 10})
}

// dropped reports whether the server closes c within a generous bound.
func dropped(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestSlowlorisIsDroppedAfterTheHeaderTimeout(t *testing.T) {
	e := limitedEnv(t)
	c, err := tls.Dial("tcp", e.addr(), e.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /virtualmachineinstances-validate HTTP/1.1\r\nHost: virt-api\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if !dropped(c) {
		t.Fatal("a client that never finishes its headers is still connected")
	}
}

func TestOversizedBodiesAre413(t *testing.T) {
	e := limitedEnv(t)
	c := e.client()
	for _, tc := range []struct{ name, method, path string }{
		{"webhook", http.MethodPost, "/virtualmachineinstances-validate"},
		{"subresource", http.MethodPut, vmis + running.Name + "/pause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Do(e.request(t, tc.method, tc.path, strings.NewReader(strings.Repeat(" ", 1<<20))))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("%d %s, want 413", resp.StatusCode, b)
			}
		})
	}
	if got := e.fake.Commands(); len(got) != 0 {
		t.Errorf("the node agent was asked %v", got)
	}
}

func TestRequestsBeyondTheCapAre429(t *testing.T) {
	e := limitedEnv(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e.fake.BeforeCommand = func(context.Context, nodeapi.VMI, nodeapi.Command) {
		entered <- struct{}{}
		<-release
	}
	c := e.client()
	first := make(chan int, 1)
	go func() {
		resp, err := c.Do(e.request(t, http.MethodPut, vmis+running.Name+"/pause", nil))
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered
	resp, err := c.Do(e.request(t, http.MethodPost, "/virtualmachineinstances-validate", strings.NewReader(review)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a request beyond the cap: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// The kubelet's probes are not counted.
	resp, err = c.Get(e.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("readyz while the cap is reached: %d", resp.StatusCode)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Errorf("the request within the cap: %d", code)
	}
}

func TestNodeAgentsTooManyRequestsReachesTheUser(t *testing.T) {
	nodeLimits := nodeapi.DefaultLimits()
	nodeLimits.MaxInFlight = 1
	e := newEnv(t, envOptions{limited: true, nodeLimit: nodeLimits})
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e.fake.BeforeCommand = func(context.Context, nodeapi.VMI, nodeapi.Command) {
		entered <- struct{}{}
		<-release
	}
	defer close(release)
	c := e.client()
	go func() {
		if resp, err := c.Do(e.request(t, http.MethodPut, vmis+running.Name+"/pause", nil)); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	resp, err := c.Do(e.request(t, http.MethodPut, vmis+running.Name+"/reset", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"reason":"TooManyRequests"`) {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}

func TestAConsoleClientThatStopsReadingIsDisconnected(t *testing.T) {
	e := limitedEnv(t)
	closed := make(chan (<-chan struct{}), 1)
	e.fake.OpenConsole = func(nodeapi.VMI) (io.ReadWriteCloser, error) {
		s, done := nodeapitest.Flood()
		closed <- done
		return s, nil
	}
	baseline := runtime.NumGoroutine()
	ws := e.console(t)
	defer ws.Close()
	// The guest floods the console; the user never reads.
	select {
	case done := <-closed:
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the node agent still streams to a user who stopped reading")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the console was never opened")
	}
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the console:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the user's connection is still open")
			}
			break
		}
	}
}

func TestAConsoleStaysOpenBeyondTheRequestTimeouts(t *testing.T) {
	l := shortLimits()
	l.ReadTimeout, l.WriteTimeout, l.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	e := newEnv(t, envOptions{limited: true, limits: l})
	ws := e.console(t)
	defer ws.Close()
	roundTrip(t, ws, "first")
	time.Sleep(time.Second)
	roundTrip(t, ws, "later")
}
