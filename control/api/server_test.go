package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

type fakeClients struct{ c client.Client }

func (f fakeClients) KubeVirt() client.Client    { return f.c }
func (f fakeClients) Kube() kubernetes.Interface { return nil }

// allowList authorizes "user verb resource/subresource" strings.
type allowList map[string]bool

func (a allowList) Allowed(_ context.Context, u User, verb, _, resource, sub, _ string) (bool, string, error) {
	return a[u.Name+" "+verb+" "+resource+"/"+sub], "", nil
}

type staticNodes nodeapi.Endpoint

func (s staticNodes) Endpoint(context.Context, string) (nodeapi.Endpoint, error) {
	return nodeapi.Endpoint(s), nil
}

type env struct {
	url    string
	client client.Client
	// proxy is the aggregation layer's client TLS config (a requestheader-signed certificate).
	proxy   *tls.Config
	fake    *nodeapitest.Fake
	streams *StreamMetrics
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	return newEnvWith(t, nil, objs...)
}

// newEnvWith is newEnv with interceptors on the API client, to stage what happens between the
// server's reads and writes.
func newEnvWith(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *env {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1.VirtualMachine{}, &v1.VirtualMachineInstance{})
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()

	dir := t.TempDir()
	ca, _ := pki.NewCA("requestheader-ca", time.Hour)
	os.WriteFile(filepath.Join(dir, "rh-ca.crt"), ca.CertPEM(), 0o644)
	proxy, _ := ca.Sign(pki.Request{CommonName: "front-proxy-client", Client: true})
	proxyCert, proxyKey, _ := proxy.Write(dir, "proxy")
	srvCA, _ := pki.NewCA("serving-ca", time.Hour)
	srv, _ := srvCA.Sign(pki.Request{CommonName: "virt-api", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	srvCert, srvKey, _ := srv.Write(dir, "serving")

	rhPool, err := tlsfiles.NewCAPool(filepath.Join(dir, "rh-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	fakeNode := nodeapitest.NewFake(nodeapi.VMI{Namespace: "default", Name: "running"})
	node := nodeapitest.Start(t, fakeNode)
	streams, err := NewStreamMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Options{
		Streams: streams,
		Clients: fakeClients{c},
		Authn:   &RequestHeaderAuth{CA: rhPool, AllowedNames: []string{"front-proxy-client"}},
		Authz: allowList{
			"alice update virtualmachines/start": true, "alice update virtualmachines/stop": true,
			"alice update virtualmachines/restart": true, "alice update virtualmachines/migrate": true,
			"alice update virtualmachineinstances/pause": true, "alice update virtualmachineinstances/unpause": true,
			"alice get virtualmachineinstances/console": true, "alice get virtualmachineinstances/vnc/screenshot": true,
			"alice get virtualmachineinstances/guestosinfo": true, "alice get virtualmachineinstances/userlist": true,
			"alice get virtualmachineinstances/filesystemlist": true, "alice get virtualmachineinstances/vsock": true,
			"alice update virtualmachineinstances/addvolume": true, "alice update virtualmachineinstances/removevolume": true,
			"alice update virtualmachines/addvolume": true, "alice update virtualmachines/removevolume": true,
			"alice update virtualmachines/memorydump": true, "alice update virtualmachines/removememorydump": true,
		},
		Nodes:      staticNodes(node.Endpoint),
		NodeClient: node.Client,
	})
	kp, _ := tlsfiles.NewKeyPair(srvCert, srvKey)
	l, err := tls.Listen("tcp", "127.0.0.1:0", tlsfiles.ServerConfig(kp.GetCertificate, nil))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	pc, _ := tls.LoadX509KeyPair(proxyCert, proxyKey)
	return &env{url: "https://" + l.Addr().String(), client: c, fake: fakeNode, streams: streams,
		proxy: &tls.Config{Certificates: []tls.Certificate{pc}, InsecureSkipVerify: true}}
}

// do sends a request as the aggregation layer would, on behalf of user.
func (e *env) do(t *testing.T, method, path, user, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if user != "" {
		req.Header.Set("X-Remote-User", user)
		req.Header.Add("X-Remote-Group", "system:authenticated")
	}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: e.proxy}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func vm(name string, rs v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	return &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.VirtualMachineSpec{RunStrategy: &rs}}
}

func vmi(name string, phase v1.VirtualMachineInstancePhase) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid-" + "name"},
		Status: v1.VirtualMachineInstanceStatus{Phase: phase, NodeName: "node01"}}
}

const ns = "/apis/subresources.kubevirt.io/v1/namespaces/default"

func TestStartStopRestartFollowRunStrategy(t *testing.T) {
	e := newEnv(t,
		vm("halted", v1.RunStrategyHalted),
		vm("haltedpaused", v1.RunStrategyHalted),
		vm("always", v1.RunStrategyAlways), vmi("always", v1.Running),
		vm("manual", v1.RunStrategyManual),
		vm("manualrunning", v1.RunStrategyManual), vmi("manualrunning", v1.Running),
		vm("once", v1.RunStrategyOnce), vmi("once", v1.Running),
	)
	cases := []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/virtualmachines/halted/stop", "", 409, "VM is not running"},
		{"/virtualmachines/halted/restart", "", 409, "Halted does not support manual restart requests"},
		{"/virtualmachines/halted/start", "", 202, ""},
		{"/virtualmachines/haltedpaused/start", `{"paused":true}`, 202, ""},
		{"/virtualmachines/always/start", "{}", 409, "Always does not support manual start requests"},
		{"/virtualmachines/manual/start", `{"paused":false}`, 202, ""},
		{"/virtualmachines/manualrunning/start", "", 409, "VM is already running"},
		{"/virtualmachines/manualrunning/restart", `{"gracePeriodSeconds":0}`, 202, ""},
		{"/virtualmachines/once/start", "", 409, "Once does not support manual start requests"},
		{"/virtualmachines/once/stop", "", 202, ""},
		{"/virtualmachines/always/stop", `{"dryRun":["All"]}`, 202, ""},
		{"/virtualmachines/missing/start", "", 404, "not found"},
		{"/virtualmachines/halted/start", "not json", 400, "not valid options"},
	}
	for _, tc := range cases {
		code, body := e.do(t, "PUT", ns+tc.path, "alice", tc.body)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("PUT %s: %d %s; want %d %q", tc.path, code, body, tc.code, tc.msg)
			continue
		}
		if code >= 400 {
			var st metav1.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || int(st.Code) != code {
				t.Errorf("PUT %s: error is not a Status: %s", tc.path, body)
			}
		}
	}
	get := func(name string) *v1.VirtualMachine {
		v := &v1.VirtualMachine{}
		if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if rs := *get("halted").Spec.RunStrategy; rs != v1.RunStrategyAlways {
		t.Errorf("halted start: runStrategy %s", rs)
	}
	// A paused start of a Halted VM only queues the request: the controller switches the VM to
	// Always when it acts on it, so the VMI cannot start before the request is seen.
	hp := get("haltedpaused")
	if r := hp.Status.StateChangeRequests; *hp.Spec.RunStrategy != v1.RunStrategyHalted || len(r) != 1 || r[0].Action != v1.StartRequest ||
		r[0].Data[v1.StartRequestDataPausedKey] != v1.StartRequestDataPausedTrue {
		t.Errorf("paused start of a halted VM: runStrategy %s, requests %v", *hp.Spec.RunStrategy, r)
	}
	if rs := *get("once").Spec.RunStrategy; rs != v1.RunStrategyHalted {
		t.Errorf("once stop: runStrategy %s", rs)
	}
	if rs := *get("always").Spec.RunStrategy; rs != v1.RunStrategyAlways {
		t.Errorf("dry-run stop changed the VM: %s", rs)
	}
	if r := get("manual").Status.StateChangeRequests; len(r) != 1 || r[0].Action != v1.StartRequest {
		t.Errorf("manual start: requests %v", r)
	}
	if r := get("manualrunning").Status.StateChangeRequests; len(r) != 2 || r[0].Action != v1.StopRequest || r[0].UID == nil || r[1].Action != v1.StartRequest {
		t.Errorf("restart: requests %v", r)
	}
	v := &v1.VirtualMachineInstance{}
	e.client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "manualrunning"}, v)
	if g := v.Spec.TerminationGracePeriodSeconds; g == nil || *g != 0 {
		t.Errorf("forced restart did not set the grace period: %v", g)
	}
}

func TestAuthnAndAuthz(t *testing.T) {
	e := newEnv(t, vm("halted", v1.RunStrategyHalted))
	if code, body := e.do(t, "PUT", ns+"/virtualmachines/halted/start", "bob", ""); code != 403 || !strings.Contains(body, `User \"bob\" cannot update resource \"virtualmachines/start\"`) {
		t.Errorf("bob: %d %s", code, body)
	}
	if code, _ := e.do(t, "PUT", ns+"/virtualmachines/halted/start", "", ""); code != 401 {
		t.Errorf("no user: %d", code)
	}
	// A client certificate the requestheader CA did not sign is not the aggregation layer.
	other, _ := pki.NewCA("other", time.Hour)
	kp, _ := other.Sign(pki.Request{CommonName: "front-proxy-client", Client: true})
	c, _ := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	e.proxy = &tls.Config{Certificates: []tls.Certificate{c}, InsecureSkipVerify: true}
	if code, _ := e.do(t, "PUT", ns+"/virtualmachines/halted/start", "alice", ""); code != 401 {
		t.Errorf("forged proxy: %d", code)
	}
}

func TestDiscoveryAndVersion(t *testing.T) {
	e := newEnv(t)
	code, body := e.do(t, "GET", "/apis/subresources.kubevirt.io/v1/", "anyone", "")
	var l metav1.APIResourceList
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.GroupVersion != "subresources.kubevirt.io/v1" || len(l.APIResources) < 12 {
		t.Fatalf("resource list: %d %s", code, body)
	}
	code, body = e.do(t, "GET", "/apis/subresources.kubevirt.io", "anyone", "")
	var g metav1.APIGroup
	if code != 200 || json.Unmarshal([]byte(body), &g) != nil || g.PreferredVersion.Version != "v1" {
		t.Fatalf("group: %d %s", code, body)
	}
	code, body = e.do(t, "GET", "/apis/subresources.kubevirt.io/v1/version", "anyone", "")
	if code != 200 || !strings.Contains(body, `"gitVersion":"v1.`) {
		t.Fatalf("version: %d %s", code, body)
	}
}

func TestPauseAndConsoleReachTheNode(t *testing.T) {
	running := vmi("running", v1.Running)
	paused := vmi("paused", v1.Running)
	paused.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue}}
	e := newEnv(t, running, paused, vmi("booting", v1.Scheduling))
	if code, body := e.do(t, "PUT", ns+"/virtualmachineinstances/running/pause", "alice", ""); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	if cmds := e.fake.Commands(); len(cmds) != 1 || cmds[0] != "pause default/running" {
		t.Errorf("node saw %v", cmds)
	}
	if code, body := e.do(t, "PUT", ns+"/virtualmachineinstances/paused/pause", "alice", ""); code != 409 || !strings.Contains(body, "VMI is already paused") {
		t.Errorf("pause paused: %d %s", code, body)
	}
	if code, body := e.do(t, "PUT", ns+"/virtualmachineinstances/running/unpause", "alice", ""); code != 409 || !strings.Contains(body, "VMI is not paused") {
		t.Errorf("unpause running: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", ns+"/virtualmachineinstances/booting/console", "alice", ""); code != 400 {
		t.Errorf("console of a booting VMI: %d, want 400 so virtctl retries", code)
	}
	code, body := e.do(t, "GET", ns+"/virtualmachineinstances/running/vnc/screenshot", "alice", "")
	if code != 200 || !strings.HasPrefix(body, "\x89PNG") {
		t.Errorf("screenshot: %d %q", code, body)
	}

	wsURL := strings.Replace(e.url, "https", "wss", 1) + ns + "/virtualmachineinstances/running/console"
	d := websocket.Dialer{TLSClientConfig: e.proxy, Subprotocols: []string{"plain.kubevirt.io"}}
	h := http.Header{"X-Remote-User": {"alice"}}
	ws, resp, err := d.Dial(wsURL, h)
	if err != nil {
		t.Fatalf("console: %v %v", err, resp)
	}
	defer ws.Close()
	if ws.Subprotocol() != "plain.kubevirt.io" {
		t.Errorf("subprotocol %q", ws.Subprotocol())
	}
	ws.WriteMessage(websocket.TextMessage, []byte("ignored"))
	ws.WriteMessage(websocket.BinaryMessage, []byte("ls\r"))
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, msg, err := ws.ReadMessage()
	if err != nil || typ != websocket.BinaryMessage || string(msg) != "ls\r" {
		t.Errorf("console echo: %d %q %v", typ, msg, err)
	}
	open := e.streams.console.WithLabelValues("default", "running")
	if n := testutil.ToFloat64(open); n != 1 {
		t.Errorf("kubevirt_console_active_connections with the console open: %v", n)
	}
	ws.Close()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(open) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := testutil.ToFloat64(open); n != 0 {
		t.Errorf("kubevirt_console_active_connections after the console closed: %v", n)
	}
}

// TestGuestAgentSubresources: guestosinfo, userlist and filesystemlist answer 409 while no
// guest agent is connected, then from what the node agent reports, in KubeVirt's shapes.
func TestGuestAgentSubresources(t *testing.T) {
	e := newEnv(t, vmi("running", v1.Running))
	for _, sub := range []string{"guestosinfo", "userlist", "filesystemlist"} {
		if code, body := e.do(t, "GET", ns+"/virtualmachineinstances/running/"+sub, "alice", ""); code != 409 || !strings.Contains(body, "VMI does not have guest agent connected") {
			t.Errorf("%s without an agent: %d %s", sub, code, body)
		}
	}
	e.fake.Agent = &v1.VirtualMachineInstanceGuestAgentInfo{GAVersion: "7.2", Hostname: "web",
		OS:       v1.VirtualMachineInstanceGuestOSInfo{ID: "qvirt-tiny", VersionID: "1"},
		UserList: []v1.VirtualMachineInstanceGuestOSUser{{UserName: "root", LoginTime: 1700000000}},
		FSInfo:   v1.VirtualMachineInstanceFileSystemInfo{Filesystems: []v1.VirtualMachineInstanceFileSystem{{DiskName: "vda", MountPoint: "/", FileSystemType: "ext4", TotalBytes: 1 << 20}}}}
	code, body := e.do(t, "GET", ns+"/virtualmachineinstances/running/guestosinfo", "alice", "")
	var info v1.VirtualMachineInstanceGuestAgentInfo
	if code != 200 || json.Unmarshal([]byte(body), &info) != nil || info.GAVersion != "7.2" || info.OS.ID != "qvirt-tiny" || info.Hostname != "web" {
		t.Errorf("guestosinfo: %d %s", code, body)
	}
	code, body = e.do(t, "GET", ns+"/virtualmachineinstances/running/userlist", "alice", "")
	var users v1.VirtualMachineInstanceGuestOSUserList
	if code != 200 || json.Unmarshal([]byte(body), &users) != nil || len(users.Items) != 1 || users.Items[0].UserName != "root" {
		t.Errorf("userlist: %d %s", code, body)
	}
	code, body = e.do(t, "GET", ns+"/virtualmachineinstances/running/filesystemlist", "alice", "")
	var fss v1.VirtualMachineInstanceFileSystemList
	if code != 200 || json.Unmarshal([]byte(body), &fss) != nil || len(fss.Items) != 1 || fss.Items[0].MountPoint != "/" || !strings.Contains(body, `"fileSystemType":"ext4"`) {
		t.Errorf("filesystemlist: %d %s", code, body)
	}
}

// TestVSOCKReachesTheGuestsPort: the vsock subresource streams to the port of a VMI with
// autoattachVSOCK, with tls=false; other VMIs, TLS and bad ports are refused with KubeVirt's
// or a clear message.
func TestVSOCKReachesTheGuestsPort(t *testing.T) {
	on := true
	running := vmi("running", v1.Running)
	running.Spec.Domain.Devices.AutoattachVSOCK = &on
	plain := vmi("plain", v1.Running)
	e := newEnv(t, running, plain)
	for _, tc := range []struct{ path, want string }{
		{"plain/vsock?port=1234&tls=false", "VSOCK is not attached."},
		{"running/vsock?port=1234", "qvirt does not support TLS over VSOCK"},
		{"running/vsock?port=1234&tls=maybe", "is neither true nor false"},
		{"running/vsock?port=0&tls=false", "is not a valid VSOCK port"},
		{"running/vsock?tls=false", "is not a valid VSOCK port"},
	} {
		if code, body := e.do(t, "GET", ns+"/virtualmachineinstances/"+tc.path, "alice", ""); code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 %q", tc.path, code, body, tc.want)
		}
	}
	wsURL := strings.Replace(e.url, "https", "wss", 1) + ns + "/virtualmachineinstances/running/vsock?port=1234&tls=false"
	d := websocket.Dialer{TLSClientConfig: e.proxy, Subprotocols: []string{"plain.kubevirt.io"}}
	ws, resp, err := d.Dial(wsURL, http.Header{"X-Remote-User": {"alice"}})
	if err != nil {
		t.Fatalf("vsock: %v %v", err, resp)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, msg, err := ws.ReadMessage(); err != nil || string(msg) != "vsock 1234\n" {
		t.Errorf("vsock greeting: %q %v", msg, err)
	}
	if cmds := e.fake.Commands(); len(cmds) == 0 || cmds[len(cmds)-1] != "vsock 1234 default/running" {
		t.Errorf("node saw %v", cmds)
	}
}
