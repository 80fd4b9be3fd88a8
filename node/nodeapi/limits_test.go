package nodeapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// testLimits are short limits, so that tests see them act.
func testLimits() httplimit.Limits {
	l := nodeapi.DefaultLimits()
	l.ReadHeaderTimeout = 300 * time.Millisecond
	l.StreamWriteTimeout = 300 * time.Millisecond
	l.MaxInFlight = 1
	return l
}

// clientTLS is virt-api's side of env's mutual TLS.
func clientTLS(t *testing.T, env *nodeapitest.Env) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(env.ClientCertFile, env.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(env.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: nodeapi.ServerName(nodeapitest.NodeName)}
}

func addr(env *nodeapitest.Env) string { return strings.TrimPrefix(env.Endpoint.URL, "https://") }

// settles waits until the process runs at most n goroutines.
func settles(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the stream:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAStreamWhoseClientStopsReadingIsClosed(t *testing.T) {
	fake := nodeapitest.NewFake(vm1)
	closed := make(chan (<-chan struct{}), 1)
	fake.OpenConsole = func(nodeapi.VMI) (io.ReadWriteCloser, error) {
		s, done := nodeapitest.Flood()
		closed <- done
		return s, nil
	}
	env := nodeapitest.StartLimited(t, fake, testLimits())
	baseline := runtime.NumGoroutine()

	// A plain websocket that never reads: it holds no goroutine of its own.
	d := websocket.Dialer{TLSClientConfig: clientTLS(t, env), Subprotocols: []string{nodeapi.Subprotocol}}
	ws, _, err := d.Dial("wss://"+addr(env)+"/v1/namespaces/default/vmis/vm1/console", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	select {
	case done := <-closed:
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the console of a client that stopped reading is still open")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the console was never opened")
	}
	settles(t, baseline)
	// What the server had sent is still buffered; after it, the connection ends.
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the client's connection is still open")
			}
			break
		}
	}
}

func TestRequestsBeyondTheCapAre429(t *testing.T) {
	fake := nodeapitest.NewFake(vm1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	fake.BeforeCommand = func(context.Context, nodeapi.VMI, nodeapi.Command) {
		entered <- struct{}{}
		<-release
	}
	env := nodeapitest.StartLimited(t, fake, testLimits())
	first := make(chan error, 1)
	go func() { first <- env.Client.Command(ctx(t), env.Endpoint, vm1, nodeapi.Pause) }()
	<-entered
	err := env.Client.Command(ctx(t), env.Endpoint, vm1, nodeapi.Unpause)
	var ne *nodeapi.Error
	if !errors.Is(err, nodeapi.ErrTooManyRequests) || !errors.As(err, &ne) || ne.Code != http.StatusTooManyRequests {
		t.Fatalf("a command beyond the cap: %v, want 429", err)
	}
	// Streams are counted apart from requests.
	s, err := env.Client.Console(ctx(t), env.Endpoint, vm1)
	if err != nil {
		t.Fatalf("a console while the request cap is reached: %v", err)
	}
	s.Close()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestSlowlorisIsDroppedAfterTheHeaderTimeout(t *testing.T) {
	env := nodeapitest.StartLimited(t, nodeapitest.NewFake(vm1), testLimits())
	c, err := tls.Dial("tcp", addr(env), clientTLS(t, env))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/namespaces/default/vmis/vm1/console HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a client that never finishes its headers is still connected")
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	env := nodeapitest.StartLimited(t, nodeapitest.NewFake(vm1), testLimits())
	req, _ := http.NewRequest(http.MethodPut, env.Endpoint.URL+"/v1/namespaces/default/vmis/vm1/pause", strings.NewReader(strings.Repeat("x", 1<<20)))
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, env)}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("answer %d, want 413", resp.StatusCode)
	}
}
