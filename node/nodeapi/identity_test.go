package nodeapi_test

import (
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// clientWithCert is a node API client presenting a certificate with common name cn, signed by
// the environment's CA.
func clientWithCert(t *testing.T, env *nodeapitest.Env, cn string) *nodeapi.Client {
	t.Helper()
	kp, err := env.CA.Sign(pki.Request{CommonName: cn, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := kp.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tlsfiles.NewKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := tlsfiles.NewCAPool(env.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return nodeapi.NewClient(func() (*tls.Config, error) { return tlsfiles.ClientConfig(cert, pool, "") })
}

func TestNodeAPIRefusesOtherClientIdentities(t *testing.T) {
	env := nodeapitest.Start(t, nodeapitest.NewFake(vm1))
	// Same CA, another name: e.g. a node agent's or a launcher's certificate.
	other := clientWithCert(t, env, "virt-handler")
	if err := other.Command(ctx(t), env.Endpoint, vm1, nodeapi.Pause); err == nil {
		t.Fatal("a client certificate that is not virt-api's was accepted")
	}
	if _, err := other.Console(ctx(t), env.Endpoint, vm1); err == nil {
		t.Fatal("a console stream was opened with a certificate that is not virt-api's")
	}
	if err := clientWithCert(t, env, nodeapi.DefaultClientIdentity).Command(ctx(t), env.Endpoint, vm1, nodeapi.Pause); err != nil {
		t.Fatalf("virt-api's identity refused: %v", err)
	}
}

func TestClientVerifiesTheNodeNameInTheServingCertificate(t *testing.T) {
	env := nodeapitest.Start(t, nodeapitest.NewFake(vm1))
	// The endpoint another node advertised: its agent holds node-1's certificate, not node-2's.
	ep := env.Endpoint
	ep.Node = "node-2"
	_, err := env.Client.Console(ctx(t), ep, vm1)
	if err == nil || !strings.Contains(err.Error(), "node-2") {
		t.Fatalf("a serving certificate for %s was accepted for node-2: %v", nodeapitest.NodeName, err)
	}
	if err := env.Client.Command(ctx(t), ep, vm1, nodeapi.Pause); err == nil {
		t.Fatal("command sent to an agent whose certificate names another node")
	}
}

func TestClientRefusesNonHTTPSEndpoints(t *testing.T) {
	env := nodeapitest.Start(t, nodeapitest.NewFake(vm1))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var dialed atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	addr := l.Addr().String()
	for _, raw := range []string{"http://" + addr, "ws://" + addr, "unix:///run/containerd/containerd.sock", "https://" + addr + "/x?y", "https://user@" + addr} {
		ep := nodeapi.Endpoint{URL: raw, Node: nodeapitest.NodeName}
		err := env.Client.Command(ctx(t), ep, vm1, nodeapi.Pause)
		if err == nil || !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("%s: want a refusal naming the endpoint, got %v", raw, err)
		}
		if _, err := env.Client.Console(ctx(t), ep, vm1); err == nil {
			t.Errorf("%s: console dialed", raw)
		}
	}
	if n := dialed.Load(); n != 0 {
		t.Errorf("%d connections made to refused endpoints", n)
	}
	if err := env.Client.Command(ctx(t), nodeapi.Endpoint{URL: env.Endpoint.URL}, vm1, nodeapi.Pause); err == nil {
		t.Error("an endpoint without a node name to verify was used")
	}
}

func TestParseEndpoint(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://10.0.0.1:8186":    true,
		"https://10.0.0.1:8186/":   true,
		"https://[fd00::1]:8186":   true,
		"https://node-a:8186":      true,
		"https://10.0.0.1":         false,
		"http://10.0.0.1:8186":     false,
		"https://10.0.0.1:8186/p":  false,
		"https://a@10.0.0.1:8186":  false,
		"https://10.0.0.1:8186#f":  false,
		"%zz":                      false,
		"":                         false,
		"file:///etc/passwd":       false,
		"https://10.0.0.1:8186?q=": false,
	} {
		_, err := nodeapi.ParseEndpoint(raw)
		if (err == nil) != ok {
			t.Errorf("ParseEndpoint(%q) = %v, want ok=%v", raw, err, ok)
		}
	}
}
