package virtapi

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/api"
	"github.com/qvirt/qvirt/control/webhooks"
	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// The tests run virt-api's real server (webhooks, subresources, probes) over TLS on loopback,
// with a node agent's API served by nodeapitest and a fake API client holding one running VMI.

type fakeClients struct{ c client.Client }

func (f fakeClients) KubeVirt() client.Client    { return f.c }
func (f fakeClients) Kube() kubernetes.Interface { return nil }

type allowAll struct{}

func (allowAll) Allowed(context.Context, api.User, string, string, string, string, string) (bool, string, error) {
	return true, "", nil
}

type staticNodes nodeapi.Endpoint

func (s staticNodes) Endpoint(context.Context, string) (nodeapi.Endpoint, error) {
	return nodeapi.Endpoint(s), nil
}

var running = nodeapi.VMI{Namespace: "default", Name: "running"}

type env struct {
	url  string
	fake *nodeapitest.Fake
	// proxy is the aggregation layer's client TLS config.
	proxy *tls.Config
	hs    *http.Server
}

type envOptions struct {
	// limited serves within limits (virt-api's and the node API's); otherwise both are served
	// as bare http.Servers without the limits middleware, for comparison.
	limited   bool
	limits    httplimit.Limits
	nodeLimit httplimit.Limits
	// maxWebhookBody and maxRequestBody as virt-api's flags.
	maxWebhookBody, maxRequestBody int64
}

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: running.Name, Namespace: running.Namespace, UID: "uid-running"},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: nodeapitest.NodeName}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi).WithStatusSubresource(&v1.VirtualMachineInstance{}).Build()

	dir := tb.TempDir()
	rhCA, err := pki.NewCA("requestheader-ca", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rh-ca.crt"), rhCA.CertPEM(), 0o644); err != nil {
		tb.Fatal(err)
	}
	proxy, _ := rhCA.Sign(pki.Request{CommonName: "front-proxy-client", Client: true})
	proxyCert, proxyKey, err := proxy.Write(dir, "proxy")
	if err != nil {
		tb.Fatal(err)
	}
	srvCA, _ := pki.NewCA("serving-ca", time.Hour)
	srv, _ := srvCA.Sign(pki.Request{CommonName: "virt-api", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	srvCert, srvKey, err := srv.Write(dir, "serving")
	if err != nil {
		tb.Fatal(err)
	}
	rhPool, err := tlsfiles.NewCAPool(filepath.Join(dir, "rh-ca.crt"))
	if err != nil {
		tb.Fatal(err)
	}

	fakeNode := nodeapitest.NewFake(running)
	var nodeLimits httplimit.Limits
	if o.limited {
		nodeLimits = o.nodeLimit
		if nodeLimits == (httplimit.Limits{}) {
			nodeLimits = nodeapi.DefaultLimits()
		}
		if o.limits == (httplimit.Limits{}) {
			o.limits = DefaultLimits()
		}
	}
	node := nodeapitest.StartLimited(tb, fakeNode, nodeLimits)
	sub := api.NewServer(api.Options{
		Clients:            fakeClients{c},
		Authn:              &api.RequestHeaderAuth{CA: rhPool, AllowedNames: []string{"front-proxy-client"}},
		Authz:              allowAll{},
		Nodes:              staticNodes(node.Endpoint),
		NodeClient:         node.Client,
		MaxBodyBytes:       o.maxRequestBody,
		StreamWriteTimeout: o.limits.StreamWriteTimeout,
	})
	wopts := webhooks.Options{MaxReviewBytes: o.maxWebhookBody}
	hs := newHTTPServer(o.limits, sub, http.NotFoundHandler(), webhooks.StaticConfig{}, wopts)

	kp, err := tlsfiles.NewKeyPair(srvCert, srvKey)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", tlsfiles.ServerConfig(kp.GetCertificate, nil))
	if err != nil {
		tb.Fatal(err)
	}
	go hs.Serve(l)
	tb.Cleanup(func() { hs.Close() })
	pc, err := tls.LoadX509KeyPair(proxyCert, proxyKey)
	if err != nil {
		tb.Fatal(err)
	}
	return &env{url: "https://" + l.Addr().String(), fake: fakeNode, hs: hs,
		proxy: &tls.Config{Certificates: []tls.Certificate{pc}, InsecureSkipVerify: true}}
}

func (e *env) addr() string { return strings.TrimPrefix(e.url, "https://") }

// client sends requests as the aggregation layer does, on keep-alive connections.
func (e *env) client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: e.proxy, MaxIdleConnsPerHost: 16}}
}

// request is a subresource or webhook request on behalf of alice.
func (e *env) request(tb testing.TB, method, path string, body *strings.Reader) *http.Request {
	tb.Helper()
	var req *http.Request
	var err error
	if body == nil {
		req, err = http.NewRequest(method, e.url+path, nil)
	} else {
		req, err = http.NewRequest(method, e.url+path, body)
	}
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-Remote-User", "alice")
	req.Header.Add("X-Remote-Group", "system:authenticated")
	return req
}

const vmis = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/"

// console opens the running VMI's console as virtctl does, as a plain websocket that holds
// no goroutine of its own.
func (e *env) console(tb testing.TB) *websocket.Conn {
	tb.Helper()
	d := websocket.Dialer{TLSClientConfig: e.proxy, Subprotocols: []string{nodeapi.Subprotocol}}
	ws, resp, err := d.Dial(strings.Replace(e.url, "https", "wss", 1)+vmis+running.Name+"/console", http.Header{"X-Remote-User": {"alice"}})
	if err != nil {
		tb.Fatalf("console: %v %+v", err, resp)
	}
	return ws
}

// review is an AdmissionReview creating a small VMI, as the API server sends it.
const review = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b1c","kind":{"group":"kubevirt.io","version":"v1","kind":"VirtualMachineInstance"},
"resource":{"group":"kubevirt.io","version":"v1","resource":"virtualmachineinstances"},"namespace":"default","operation":"CREATE",
"userInfo":{"username":"alice","groups":["system:authenticated"]},
"object":{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"vmi1","namespace":"default"},
"spec":{"domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]},"resources":{"requests":{"memory":"64Mi"}}},
"volumes":[{"name":"root","containerDisk":{"image":"quay.io/kubevirt/cirros-container-disk-demo"}}]}}}}`

// roundTrip types msg into a console and reads its echo.
func roundTrip(tb testing.TB, ws *websocket.Conn, msg string) {
	tb.Helper()
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
		tb.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := ""
	for len(got) < len(msg) {
		_, b, err := ws.ReadMessage()
		if err != nil {
			tb.Fatalf("echo of %q: %v", msg, err)
		}
		got += string(b)
	}
	if got != msg {
		tb.Fatalf("echo %q, want %q", got, msg)
	}
}
