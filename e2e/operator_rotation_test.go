package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// traffic counts calls of one kind and keeps the first failures.
type traffic struct {
	name          string
	calls, failed atomic.Int64
	mu            sync.Mutex
	errs          []string
}

func (tr *traffic) record(err error) {
	tr.calls.Add(1)
	if err == nil {
		return
	}
	tr.failed.Add(1)
	tr.mu.Lock()
	if len(tr.errs) < 5 {
		tr.errs = append(tr.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
	tr.mu.Unlock()
}

// loop calls call every interval until ctx ends, counting from its first success (before
// that, what is called may still be starting).
func (tr *traffic) loop(ctx context.Context, every time.Duration, call func(context.Context) error) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := call(cctx)
		cancel()
		if err == nil {
			tr.record(nil)
			break
		}
		time.Sleep(every)
	}
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := call(cctx)
		cancel()
		if ctx.Err() != nil {
			return // the test ended this call, not the server
		}
		tr.record(err)
		time.Sleep(every)
	}
}

// bundleSerials are the serials of the certificates of a PEM bundle.
func bundleSerials(b []byte) []string {
	var out []string
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c.SerialNumber.Text(16))
		}
	}
}

func TestCertificatesRotateUnderTrafficWithoutAFailedCall(t *testing.T) {
	c := localStack(t)
	ctx := context.Background()
	const name = "rotating"
	startVM(t, c, vmManifest(name, "", "masquerade"))
	t.Cleanup(func() { _ = c.DeleteVMs(context.Background()) })
	console := stream(t, c, "virtualmachineinstances/"+name+"/console")
	send(t, console, "\n")
	expect(t, console, "qvirt# ", 90*time.Second)

	var vm v1.VirtualMachine
	if err := yaml.Unmarshal([]byte(vmManifest("dry-run", "", "masquerade")), &vm); err != nil {
		t.Fatal(err)
	}
	cl := kv(t, c)
	rest := c.Kube.CoreV1().RESTClient()
	webhooks := &traffic{name: "webhook calls (server-side dry-run creates of a VM)"}
	aggregated := &traffic{name: "aggregated API calls (subresources.kubevirt.io healthz)"}
	nodePath := &traffic{name: "virt-api -> virt-handler calls (VNC screenshots)"}
	trafficCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []func(){
		func() {
			webhooks.loop(trafficCtx, 200*time.Millisecond, func(ctx context.Context) error {
				return cl.Create(ctx, vm.DeepCopy(), client.DryRunAll)
			})
		},
		func() {
			aggregated.loop(trafficCtx, 200*time.Millisecond, func(ctx context.Context) error {
				_, err := rest.Get().AbsPath("/apis/subresources.kubevirt.io/v1/healthz").DoRaw(ctx)
				return err
			})
		},
		func() {
			nodePath.loop(trafficCtx, 2*time.Second, func(ctx context.Context) error {
				_, err := rest.Get().AbsPath("/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/" + name + "/vnc/screenshot").DoRaw(ctx)
				return err
			})
		},
	} {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	defer func() { stop(); wg.Wait() }()

	kube := c.Kube.CoreV1()
	bundleOf := func(cm string) []string {
		m, err := kube.ConfigMaps("kubevirt").Get(ctx, cm, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return bundleSerials([]byte(m.Data["ca-bundle"]))
	}
	servingOf := func() string {
		s, err := kube.Secrets("kubevirt").Get(ctx, "kubevirt-virt-api-certs", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		if sn := bundleSerials(s.Data["tls.crt"]); len(sn) == 1 {
			return sn[0]
		}
		return ""
	}
	firstCAs, firstNodeCAs := bundleOf("kubevirt-ca"), bundleOf("kubevirt-node-ca")

	// Lifetimes this short need the operator to count on changes reaching the components
	// within 30 s (the nodes' kubelets sync pods every 10 s).
	setOperatorArgs(t, c, "--propagation=30s")
	// KubeVirt's field, with lifetimes short enough to see two CA rotations and several server
	// certificate renewals in a few minutes.
	strategy := `{"spec":{"certificateRotateStrategy":{"selfSigned":{"ca":{"duration":"4m","renewBefore":"2m"},"server":{"duration":"2m","renewBefore":"1m"}}}}}`
	kvr := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"}}
	if err := cl.Patch(ctx, kvr, client.RawPatch(types.MergePatchType, []byte(strategy))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Patch(context.Background(), kvr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"certificateRotateStrategy":{"selfSigned":null}}}`)))
		time.Sleep(2 * time.Second) // let the operator act on it before waiting
		waitAvailable(t, c, 5*time.Minute)
	})
	began := time.Now()
	// Serials in the order they joined each bundle, and when.
	var cas, nodeCAs, servings []string
	seen := map[string]time.Duration{}
	note := func(list *[]string, serials ...string) {
		for _, s := range serials {
			if _, ok := seen[s]; !ok && s != "" {
				seen[s] = time.Since(began).Round(time.Second)
				*list = append(*list, s)
			}
		}
	}
	note(&cas, firstCAs...)
	note(&nodeCAs, firstNodeCAs...)
	gone := func(serial string, bundle []string) bool {
		return !strings.Contains(" "+strings.Join(bundle, " ")+" ", " "+serial+" ")
	}
	// Done once the first short-lived CA (made when the lifetimes changed) has itself been
	// replaced and has left the bundle (a full rotation), with the original gone too, virt-api's
	// serving certificate renewed three times, and the node CA rotated twice.
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 8*time.Minute, true, func(context.Context) (bool, error) {
		now := bundleOf("kubevirt-ca")
		note(&cas, now...)
		note(&nodeCAs, bundleOf("kubevirt-node-ca")...)
		note(&servings, servingOf())
		short := cas[len(firstCAs):]
		full := len(short) >= 2 && gone(short[0], now)
		for _, s := range firstCAs {
			full = full && gone(s, now)
		}
		return full && len(servings) >= 4 && len(nodeCAs) >= len(firstNodeCAs)+2, nil
	})
	stop()
	wg.Wait()
	at := func(list []string) string {
		var b strings.Builder
		for _, s := range list {
			fmt.Fprintf(&b, " %s@%v", s, seen[s])
		}
		return b.String()
	}
	t.Logf("after %v: CAs (serial@first seen):%s; node CAs:%s; virt-api serving certificates:%s",
		time.Since(began).Round(time.Second), at(cas), at(nodeCAs), at(servings))
	if err != nil {
		t.Errorf("rotations not seen in time: %v", err)
	}
	for _, tr := range []*traffic{webhooks, aggregated, nodePath} {
		t.Logf("%s: %d, failed %d", tr.name, tr.calls.Load(), tr.failed.Load())
		if tr.calls.Load() == 0 {
			t.Errorf("%s: none made", tr.name)
		}
		if tr.failed.Load() != 0 {
			t.Errorf("%s: %d failed, first: %s", tr.name, tr.failed.Load(), strings.Join(tr.errs, "; "))
		}
	}
	// The console session opened before the rotations still works.
	send(t, console, "echo still-$((6*7))\n")
	expect(t, console, "still-42", 30*time.Second)
	// And new ones open, through the renewed certificates.
	if up := consoleUptime(t, c, name); up <= 0 {
		t.Errorf("uptime %v over a new console", up)
	}
}

// setOperatorArgs adds args to virt-operator's and waits for the rollout; the test's end puts
// the manifest's back.
func setOperatorArgs(t *testing.T, c *localcluster.Cluster, args ...string) {
	t.Helper()
	ctx := context.Background()
	d, err := c.Kube.AppsV1().Deployments("kubevirt").Get(ctx, "virt-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := func(args []string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "virt-operator", "args": args}}}}}})
		if _, err := c.Kube.AppsV1().Deployments("kubevirt").Patch(ctx, "virt-operator", types.StrategicMergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := c.K8s.Kubectl("rollout", "status", "-n", "kubevirt", "deployment/virt-operator", "--timeout=3m").CombinedOutput(); err != nil {
			t.Fatalf("virt-operator rollout: %v: %s", err, out)
		}
	}
	orig := d.Spec.Template.Spec.Containers[0].Args
	set(append(append([]string(nil), orig...), args...))
	t.Cleanup(func() { set(orig) })
}
