package commands

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/qvirt/qvirt/internal/pki"
)

// request is what the fake API server saw of one request.
type request struct {
	Method, Path, Query, Body string
	// Subprotocol is the websocket subprotocol offered, empty for plain requests.
	Subprotocol string
	// Auth is the Authorization header; ClientCN the client certificate's common name.
	Auth, ClientCN string
}

// fakeAPI is a TLS API server that records every request and answers from handler.
type fakeAPI struct {
	srv *httptest.Server
	ca  *pki.CA

	mu      sync.Mutex
	reqs    []request
	handler http.HandlerFunc
}

func newFakeAPI(t *testing.T, handler http.HandlerFunc) *fakeAPI {
	t.Helper()
	ca, err := pki.NewCA("test-client-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{ca: ca, handler: handler}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	f.srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec := request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: string(b),
		Subprotocol: r.Header.Get("Sec-Websocket-Protocol"), Auth: r.Header.Get("Authorization"),
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		rec.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	f.mu.Unlock()
	f.handler(w, r)
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// kubeconfig writes a kubeconfig for the server: a client certificate for CN "alice", or a
// bearer token when token is set; the context's namespace is ns.
func (f *fakeAPI) kubeconfig(t *testing.T, token, ns string) string {
	t.Helper()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	user := fmt.Sprintf("    token: %s\n", token)
	if token == "" {
		kp, err := f.ca.Sign(pki.Request{CommonName: "alice", Client: true})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cert, key, err := kp.Write(dir, "alice")
		if err != nil {
			t.Fatal(err)
		}
		user = fmt.Sprintf("    client-certificate: %s\n    client-key: %s\n", cert, key)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: u
  user:
%scontexts:
- name: fake
  context:
    cluster: fake
    user: u
    namespace: %s
current-context: fake
`, f.srv.URL, caFile, user, ns)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until re matches the buffer and returns the submatches.
func (s *syncBuffer) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(s.String()); m != nil {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("output %q never matched %s", s.String(), re)
	return nil
}

// result is one virtctl run.
type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, kubeconfig string, stdin io.Reader, args ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var stdout, stderr syncBuffer
	code := Execute(context.Background(), append([]string{"--kubeconfig", kubeconfig}, args...), stdin, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// writeStatus answers with a Kubernetes Status, as virt-api does.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"code": code, "reason": reason, "message": msg,
	})
}

var upgrader = websocket.Upgrader{Subprotocols: []string{"plain.kubevirt.io"}}

// echoStream upgrades and echoes every binary message back.
func echoStream(w http.ResponseWriter, r *http.Request) {
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
