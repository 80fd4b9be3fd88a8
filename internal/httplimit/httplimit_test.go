package httplimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// serve runs h within l on a loopback listener and returns its address.
func serve(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := l.Server(h)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server ends c within d, reading (and dropping) whatever
// it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

func get(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSlowlorisIsDroppedAfterTheHeaderTimeout(t *testing.T) {
	addr := serve(t, Limits{ReadHeaderTimeout: 200 * time.Millisecond}, http.HandlerFunc(ok))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Headers begun, never finished.
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, 20*time.Second) {
		t.Fatal("a client that never finishes its headers is still connected")
	}
	if code, _ := get(t, addr); code != 200 {
		t.Errorf("the server answers %d to a normal client afterwards", code)
	}
}

func TestSlowBodyIsDroppedAfterTheReadTimeout(t *testing.T) {
	readErr := make(chan error, 1)
	addr := serve(t, Limits{ReadTimeout: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nten bytes."); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the body read succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a body that never ends is still being read")
	}
	if !closedWithin(c, 20*time.Second) {
		t.Fatal("the connection of a stalled body is still open")
	}
}

func TestReadTimeoutEndsWithTheBody(t *testing.T) {
	// A request whose body arrived in time may take longer than ReadTimeout to handle.
	const rt = 100 * time.Millisecond
	addr := serve(t, Limits{ReadTimeout: rt, WriteTimeout: time.Minute}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		time.Sleep(5 * rt)
		if err := r.Context().Err(); err != nil {
			http.Error(w, "context: "+err.Error(), 500)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

func TestWriteTimeoutEndsTheRequestContext(t *testing.T) {
	addr := serve(t, Limits{WriteTimeout: 100 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			http.Error(w, "gave up", http.StatusGatewayTimeout)
		case <-time.After(20 * time.Second):
			_, _ = io.WriteString(w, "late")
		}
	}))
	t0 := time.Now()
	code, _ := get(t, addr)
	if code != http.StatusGatewayTimeout || time.Since(t0) > 10*time.Second {
		t.Fatalf("answer %d after %v, want the handler's context ended", code, time.Since(t0))
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	addr := serve(t, Limits{}, MaxBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				TooLarge(w, mbe.Limit)
				return
			}
			http.Error(w, err.Error(), 400)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}), 1024))
	for _, tc := range []struct {
		name string
		body io.Reader
		code int
	}{
		{"announced", strings.NewReader(strings.Repeat("x", 2048)), 413},
		// No Content-Length: chunked, found too large while reading.
		{"chunked", io.MultiReader(strings.NewReader(strings.Repeat("x", 2048))), 413},
		{"small", strings.NewReader("x"), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post("http://"+addr+"/", "text/plain", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("%d %s, want %d", resp.StatusCode, b, tc.code)
			}
			if tc.code == 413 && !strings.Contains(string(b), `"reason":"RequestEntityTooLarge"`) {
				t.Errorf("body %s is not a Status", b)
			}
		})
	}
}

// blocking is a handler that holds every request until release is closed.
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.entered <- struct{}{}
	<-b.release
	_, _ = io.WriteString(w, "ok")
}

func TestRequestsBeyondTheCapAre429(t *testing.T) {
	b := newBlocking()
	addr := serve(t, Limits{MaxInFlight: 2, RetryAfter: 3 * time.Second}, b)
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	<-b.entered
	<-b.entered
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("third request: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if !strings.Contains(string(body), `"retryAfterSeconds":3`) {
		t.Errorf("body %s", body)
	}
	close(b.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("a request within the cap got %d", c)
		}
	}
	if code, _ := get(t, addr); code != 200 {
		t.Errorf("after the others finished: %d", code)
	}
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// echo is a websocket echo server; other requests answer ok.
func echo(w http.ResponseWriter, r *http.Request) {
	if !IsStream(r) {
		ok(w, r)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	for {
		typ, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if err := ws.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}

func dialWS(addr string) (*websocket.Conn, *http.Response, error) {
	return websocket.DefaultDialer.Dial("ws://"+addr+"/", nil)
}

func roundTrip(ws *websocket.Conn, s string) error {
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(s)); err != nil {
		return err
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, msg, err := ws.ReadMessage()
	if err != nil {
		return err
	}
	if string(msg) != s {
		return fmt.Errorf("echo %q, want %q", msg, s)
	}
	return nil
}

func TestStreamsOutliveTheRequestTimeouts(t *testing.T) {
	const d = 100 * time.Millisecond
	addr := serve(t, Limits{ReadTimeout: d, WriteTimeout: d, IdleTimeout: d, ReadHeaderTimeout: d}, http.HandlerFunc(echo))
	ws, _, err := dialWS(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := roundTrip(ws, "first"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * d)
	if err := roundTrip(ws, "later"); err != nil {
		t.Fatalf("a stream idle longer than the request timeouts: %v", err)
	}
}

func TestStreamsBeyondTheirCapAre429(t *testing.T) {
	addr := serve(t, Limits{MaxStreams: 1, MaxInFlight: 1}, http.HandlerFunc(echo))
	first, _, err := dialWS(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := dialWS(addr)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second stream: %v %+v", err, resp)
	}
	// Streams do not count against requests.
	if code, _ := get(t, addr); code != 200 {
		t.Errorf("a request while the stream is open: %d", code)
	}
	first.Close()
	// The slot frees once the server sees the stream end.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ws, _, err := dialWS(addr)
		if err == nil {
			ws.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream slot never freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKeepAliveDeadlinesDoNotLeakIntoAStream(t *testing.T) {
	// A short request, then a stream upgrade on the same connection: the write deadline the
	// request set must not end the stream.
	const d = 100 * time.Millisecond
	addr := serve(t, Limits{WriteTimeout: d, ReadTimeout: d}, http.HandlerFunc(echo))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ws, _, err := websocket.NewClient(&bufConn{Conn: c, r: br}, mustURL("ws://"+addr+"/"), nil, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * d)
	if err := roundTrip(ws, "still here"); err != nil {
		t.Fatalf("stream after a keep-alive request: %v", err)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
