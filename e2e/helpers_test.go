package e2e

import (
	"bytes"
	"context"
	"fmt"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/netplumb"
)

// vmManifest is a tiny-guest VM pinned to node (anywhere when ""), with the given binding
// ("bridge" or "masquerade").
func vmManifest(name, node, binding string) string {
	ports := ""
	if binding == "masquerade" {
		ports = "\n            ports:\n            - port: 80"
	}
	pin := "\n      nodeSelector: {kubernetes.io/hostname: " + node + "}"
	if node == "" {
		pin = ""
	}
	return fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: %[1]s, namespace: default}
spec:
  runStrategy: Always
  template:
    metadata:
      labels: {app: %[1]s}
    spec:%[2]s
      terminationGracePeriodSeconds: 20
      domain:
        memory: {guest: 192Mi}
        firmware:
          kernelBoot:
            kernelArgs: console=ttyS0 quiet
            container: {image: localhost:5000/qvirt/tiny-kernel:latest, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
        devices:
          disks:
          - name: rootdisk
            disk: {bus: virtio}
          interfaces:
          - name: default
            %[3]s: {}%[4]s
      networks:
      - name: default
        pod: {}
      volumes:
      - name: rootdisk
        containerDisk: {image: localhost:5000/qvirt/tiny-disk:latest}
`, name, pin, binding, ports)
}

// startVM applies a manifest and waits for the VM to run. If the test fails, the guest's
// console log and QEMU's log are printed, as they say why a guest did not answer.
func startVM(t testing.TB, c *localcluster.Cluster, manifest string) {
	t.Helper()
	var meta struct {
		Metadata struct{ Name string }
	}
	_ = yaml.Unmarshal([]byte(manifest), &meta)
	t.Cleanup(func() {
		if t.Failed() {
			dumpVM(t, c, meta.Metadata.Name)
		}
	})
	f := filepath.Join(t.TempDir(), "vm.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := c.ApplyAndWait(ctx, f, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func getVMI(t *testing.T, c *localcluster.Cluster, name string) *v1.VirtualMachineInstance {
	t.Helper()
	vmi := &v1.VirtualMachineInstance{}
	if err := kv(t, c).Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
		t.Fatal(err)
	}
	return vmi
}

// launcherPod returns the running launcher pod of a VMI.
func launcherPod(t *testing.T, c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	kube, err := kubernetes.NewForConfig(c.K8s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	pods, err := kube.CoreV1().Pods(vmi.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher,kubevirt.io/created-by=" + string(vmi.UID)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("launcher pod of %s: %v %v", vmi.Name, err, pods)
	}
	return &pods.Items[0]
}

// httpFromPod fetches url from inside a pod's network namespace, retrying while the guest boots.
func httpFromPod(t *testing.T, c *localcluster.Cluster, pod *corev1.Pod, url, want string) {
	t.Helper()
	httpFromNetns(t, podNetns(t, c, pod), url, want)
}

// httpFromNetns fetches url from inside a network namespace, retrying while the guest boots.
func httpFromNetns(t *testing.T, ns, url, want string) {
	if !strings.Contains(strings.TrimPrefix(url, "http://"), ":") {
		url = strings.TrimSuffix(url, "/") + ":80/"
	}
	t.Helper()
	var last string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		var body []byte
		// The socket must be created on the thread inside the namespace: dial here, not in an
		// http.Transport goroutine that may run anywhere.
		var conn net.Conn
		err := netplumb.Do(ns, func() error {
			var err error
			conn, err = net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), 3*time.Second)
			return err
		})
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			if err == nil {
				body, err = io.ReadAll(conn)
			}
			conn.Close()
		}
		if err == nil && strings.Contains(string(body), want) {
			return
		}
		last = fmt.Sprintf("%v %q", err, body)
	}
	t.Fatalf("GET %s from %s never returned %q: %s", url, ns, want, last)
}

// stream opens a subresource websocket through the kube-apiserver, as virtctl does.
func stream(t testing.TB, c *localcluster.Cluster, path string) *websocket.Conn {
	t.Helper()
	cfg := c.K8s.RESTConfig()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := strings.Replace(cfg.Host, "https://", "wss://", 1) + "/apis/subresources.kubevirt.io/v1/namespaces/default/" + path
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{"plain.kubevirt.io"}, HandshakeTimeout: 30 * time.Second}
	var ws *websocket.Conn
	var resp *http.Response
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		ws, resp, err = d.Dial(u, nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			body := ""
			if resp != nil {
				b, _ := io.ReadAll(resp.Body)
				body = string(b)
			}
			t.Fatalf("websocket %s: %v %s", path, err, body)
		}
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// expect reads binary messages until the accumulated output contains want.
func expect(t testing.TB, ws *websocket.Conn, want string, within time.Duration) string {
	t.Helper()
	var buf bytes.Buffer
	deadline := time.Now().Add(within)
	for !strings.Contains(buf.String(), want) {
		_ = ws.SetReadDeadline(deadline)
		typ, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %q: %v; got %q", want, err, buf.String())
		}
		if typ == websocket.BinaryMessage {
			buf.Write(msg)
		}
	}
	return buf.String()
}

func send(t testing.TB, ws *websocket.Conn, s string) {
	t.Helper()
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// scrape returns the node agent's /metrics text, read over verified TLS.
func scrape(t testing.TB, ep metricsEndpoint) string {
	t.Helper()
	resp, err := ep.Client.Get("https://" + ep.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sample finds the value of the series of family for VM name (and an optional extra label).
func sample(text, family, name, extra string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, family+"{") || !strings.Contains(line, `name="`+name+`"`) || !strings.Contains(line, extra) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
			return v, true
		}
	}
	return 0, false
}

func dialTCP(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }

// serialLog is what a VM's serial console printed as far back as the node keeps it: the
// launcher rotates serial0.log into serial0.log.1.
func serialLog(c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) string {
	dir := vmDir(c, vmi)
	older, _ := os.ReadFile(filepath.Join(dir, "serial0.log.1"))
	current, _ := os.ReadFile(filepath.Join(dir, "serial0.log"))
	return string(older) + string(current)
}

// vmDir is the host directory of the VM directory of vmi's newest launcher pod on its node
// ("" when there is none).
func vmDir(c *localcluster.Cluster, vmi *v1.VirtualMachineInstance) string {
	pods, err := c.Kube.CoreV1().Pods(vmi.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher,kubevirt.io/created-by=" + string(vmi.UID)})
	if err != nil {
		return ""
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == vmi.Status.NodeName && (newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp)) {
			newest = p
		}
	}
	if newest == nil {
		return ""
	}
	return c.VMDir(newest.Spec.NodeName, newest.UID)
}

// dumpVM logs the tail of a VM's serial console and QEMU logs.
func dumpVM(t testing.TB, c *localcluster.Cluster, name string) {
	vmi := &v1.VirtualMachineInstance{}
	if err := kv(t, c).Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, vmi); err != nil {
		t.Logf("diagnostics for %s: %v", name, err)
		return
	}
	t.Logf("VMI %s: phase %s node %s conditions %+v", name, vmi.Status.Phase, vmi.Status.NodeName, vmi.Status.Conditions)
	for _, f := range []string{"serial0.log.1", "serial0.log", "qemu.log", "launcher.log"} {
		b, err := os.ReadFile(filepath.Join(vmDir(c, vmi), f))
		if err != nil {
			continue
		}
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("--- %s of %s:\n%s", f, name, b)
	}
}

// condition is the VMI's condition of type ct, or nil.
func condition(vmi *v1.VirtualMachineInstance, ct v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == ct {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// dumpOperator logs the tail of every virt-operator pod's log.
func dumpOperator(t testing.TB, c *localcluster.Cluster) {
	ctx := context.Background()
	pods, err := c.Kube.CoreV1().Pods("kubevirt").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-operator"})
	if err != nil {
		t.Logf("listing virt-operator pods: %v", err)
		return
	}
	lines := int64(80)
	for _, p := range pods.Items {
		b, err := c.Kube.CoreV1().Pods("kubevirt").GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
		t.Logf("--- log of %s (%v):\n%s", p.Name, err, b)
	}
}
