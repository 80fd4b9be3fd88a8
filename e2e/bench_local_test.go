package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// burstSizes are how many VMIs one `kubectl create -f` submits at once.
var burstSizes = []int{1, 5, 10, 20}

// BenchmarkVMIStartBurst creates bursts of small VMIs (128Mi guests, masquerade, the tiny guest)
// with one `kubectl create -f` of a List each, placed by the scheduler over both nodes, and
// reports create -> Running per burst size, p50 and p95, measured two ways:
//   - client-*: a client listing the VMIs every 100 ms, from just before kubectl starts (so it
//     includes kubectl's own start and the create requests) to the first list showing Running;
//   - status-*: the VMIs' own status.phaseTransitionTimestamps against their creationTimestamp.
//     Both are metav1.Time, whole seconds, so each difference is good to +-1 s.
//
// It runs once with the guests started and once with spec.startStrategy Paused. Both wait for
// phase Running, which KubeVirt also gives a VMI started paused (with condition Paused=True);
// paused-condition-vmis counts the VMIs that had that condition once Running.
//
// Each burst is deleted, and its pods waited for, before the next. The 20-VMI burst with started
// guests also reports how long a scrape of the busiest node agent's /metrics takes.
func BenchmarkVMIStartBurst(b *testing.B) {
	c := localStack(b)
	warmNodes(b, c)
	for _, strategy := range []string{"started", "paused"} {
		for _, n := range burstSizes {
			b.Run(fmt.Sprintf("guest=%s/vmis=%d", strategy, n), func(b *testing.B) {
				specs := make([]map[string]any, n)
				for i := range specs {
					specs[i] = burstSpec(strategy == "paused", "")
				}
				r := startBurst(b, c, specs)
				r.report(b)
				if strategy == "started" && n == burstSizes[len(burstSizes)-1] {
					reportScrape(b, c, r)
				}
				r.delete(b, c)
			})
		}
	}
}

// warmNodes runs one VMI on each node first, so that no burst includes the nodes' first pulls of
// the launcher and guest images.
func warmNodes(b *testing.B, c *localcluster.Cluster) {
	var specs []map[string]any
	for _, node := range e2eNodes {
		specs = append(specs, burstSpec(false, node))
	}
	r := startBurst(b, c, specs)
	for _, vmi := range r.vmis {
		b.Logf("first VMI on %s: client-observed create -> Running %.1f s", vmi.Status.NodeName, r.running[vmi.Name].Sub(r.began).Seconds())
	}
	r.delete(b, c)
}

// burstSpec is the spec of one burst VMI: vmManifest's tiny guest with 128Mi, placed by the
// scheduler unless node is set.
func burstSpec(paused bool, node string) map[string]any {
	var vm map[string]any
	if err := yaml.Unmarshal([]byte(vmManifest("x", node, "masquerade")), &vm); err != nil {
		panic(err)
	}
	spec := vm["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if node == "" {
		delete(spec, "nodeSelector")
	}
	spec["domain"].(map[string]any)["memory"] = map[string]any{"guest": "128Mi"}
	if paused {
		spec["startStrategy"] = string(v1.StartStrategyPaused)
	}
	return spec
}

// burst is one `kubectl create` of VMIs and what a client saw of them.
type burst struct {
	run string
	// began is just before kubectl started; createTook how long it ran.
	began      time.Time
	createTook time.Duration
	// scheduled and running are when a poll first saw each VMI in phase Scheduled (or later) and
	// Running.
	scheduled, running map[string]time.Time
	// vmis are the VMIs as the poll that saw the last of them Running listed them.
	vmis []v1.VirtualMachineInstance
}

// startBurst creates one VMI per spec with a single `kubectl create -f` and polls every 100 ms
// until all are Running. The VMIs are deleted when the benchmark ends, if not before.
func startBurst(b *testing.B, c *localcluster.Cluster, specs []map[string]any) *burst {
	b.Helper()
	r := &burst{run: fmt.Sprintf("b%d", time.Now().UnixNano()/1e6%1000000), scheduled: map[string]time.Time{}, running: map[string]time.Time{}}
	items := make([]any, len(specs))
	for i, spec := range specs {
		items[i] = map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
			"metadata": map[string]any{"name": fmt.Sprintf("%s-%02d", r.run, i), "namespace": "default", "labels": map[string]any{"bench": r.run}},
			"spec":     spec}
	}
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	f := filepath.Join(b.TempDir(), "burst.json")
	if err := os.WriteFile(f, list, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.delete(b, c) })

	cl := kv(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r.began = time.Now()
	if out, err := c.K8s.Kubectl("create", "-f", f).CombinedOutput(); err != nil {
		b.Fatalf("kubectl create: %v: %s", err, out)
	}
	r.createTook = time.Since(r.began)
	for len(r.running) < len(specs) {
		now := time.Now()
		var l v1.VirtualMachineInstanceList
		err := cl.List(ctx, &l, client.InNamespace("default"), client.MatchingLabels{"bench": r.run})
		for _, vmi := range l.Items {
			switch vmi.Status.Phase {
			case v1.Running:
				if _, seen := r.running[vmi.Name]; !seen {
					r.running[vmi.Name] = now
				}
				fallthrough
			case v1.Scheduled:
				if _, seen := r.scheduled[vmi.Name]; !seen {
					r.scheduled[vmi.Name] = now
				}
			case v1.Failed, v1.Succeeded:
				b.Fatalf("VMI %s ended %s (%s) before Running", vmi.Name, vmi.Status.Phase, vmi.Status.Reason)
			}
		}
		if err == nil {
			r.vmis = l.Items
		}
		if ctx.Err() != nil {
			b.Fatalf("%d of %d VMIs Running after 10 min (last list: %v)", len(r.running), len(specs), err)
		}
		time.Sleep(time.Until(now.Add(100 * time.Millisecond)))
	}
	return r
}

func (r *burst) report(b *testing.B) {
	var client, clientSched, status, statusSched []time.Duration
	perNode := map[string]int{}
	paused := 0
	for _, vmi := range r.vmis {
		client = append(client, r.running[vmi.Name].Sub(r.began))
		clientSched = append(clientSched, r.running[vmi.Name].Sub(r.scheduled[vmi.Name]))
		running, scheduled := phaseEntered(&vmi, v1.Running), phaseEntered(&vmi, v1.Scheduled)
		status = append(status, running.Sub(vmi.CreationTimestamp.Time))
		statusSched = append(statusSched, running.Sub(scheduled))
		perNode[vmi.Status.NodeName]++
		if cond := condition(&vmi, v1.VirtualMachineInstancePaused); cond != nil && cond.Status == corev1.ConditionTrue {
			paused++
		}
	}
	reportPercentiles(b, client, "client-create-to-running")
	reportPercentiles(b, clientSched, "client-scheduled-to-running")
	reportPercentiles(b, status, "status-create-to-running")
	reportPercentiles(b, statusSched, "status-scheduled-to-running")
	b.ReportMetric(r.createTook.Seconds(), "kubectl-create-s")
	busiest := 0
	for _, n := range perNode {
		busiest = max(busiest, n)
	}
	b.ReportMetric(float64(busiest), "vmis-on-busiest-node")
	b.ReportMetric(float64(paused), "paused-condition-vmis")
}

// phaseEntered is when the VMI's status says it entered phase (zero if it does not say).
func phaseEntered(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) time.Time {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return time.Time{}
}

// reportPercentiles reports the nearest-rank p50 and p95 of d in seconds.
func reportPercentiles(b *testing.B, d []time.Duration, name string) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	rank := func(p float64) float64 { return d[max(int(math.Ceil(p*float64(len(d))))-1, 0)].Seconds() }
	b.ReportMetric(rank(0.50), name+"-p50-s")
	b.ReportMetric(rank(0.95), name+"-p95-s")
}

// delete deletes the burst's VMIs and waits until their pods are gone. It does nothing the second
// time.
func (r *burst) delete(b *testing.B, c *localcluster.Cluster) {
	if r.run == "" {
		return
	}
	cl := kv(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sel := client.MatchingLabels{"bench": r.run}
	if err := cl.DeleteAllOf(ctx, &v1.VirtualMachineInstance{}, client.InNamespace("default"), sel); err != nil {
		b.Errorf("deleting burst %s: %v", r.run, err)
	}
	for {
		var pods corev1.PodList
		var vmis v1.VirtualMachineInstanceList
		errP, errV := cl.List(ctx, &pods, client.InNamespace("default"), sel), cl.List(ctx, &vmis, client.InNamespace("default"), sel)
		if errP == nil && errV == nil && len(pods.Items) == 0 && len(vmis.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			b.Errorf("burst %s: %d pods and %d VMIs left after 5 min", r.run, len(pods.Items), len(vmis.Items))
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.run = ""
}

// reportScrape times /metrics of the node agent with the most of the burst's VMs, once their
// guests have booted and its stats cache has filled.
func reportScrape(b *testing.B, c *localcluster.Cluster, r *burst) {
	perNode := map[string][]string{}
	for _, vmi := range r.vmis {
		perNode[vmi.Status.NodeName] = append(perNode[vmi.Status.NodeName], vmi.Name)
	}
	node := e2eNodes[0]
	for n, names := range perNode {
		if len(names) > len(perNode[node]) {
			node = n
		}
	}
	time.Sleep(15 * time.Second)
	addr := handlerMetrics(b, c, node)
	const scrapes = 10
	t0 := time.Now()
	for i := 0; i < scrapes; i++ {
		if text := scrape(b, addr); !strings.Contains(text, perNode[node][0]) {
			b.Fatalf("node agent on %s does not report %s", node, perNode[node][0])
		}
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/scrapes/1000, "scrape-ms")
	b.ReportMetric(float64(len(perNode[node])), "scrape-vms")
}

// BenchmarkConsoleRoundTrip types into a guest's serial console through the kube-apiserver and
// virt-api and reports keystroke-to-echo latency.
func BenchmarkConsoleRoundTrip(b *testing.B) {
	c := localStack(b)
	startVM(b, c, vmManifest("echo", e2eNodes[1], "masquerade"))
	ws := stream(b, c, "virtualmachineinstances/echo/console")
	send(b, ws, "\n")
	expect(b, ws, "qvirt# ", 60*time.Second)
	var lat []time.Duration
	for i := 0; i < 30; i++ {
		ch := string(rune('a' + i%26))
		t0 := time.Now()
		send(b, ws, ch)
		expect(b, ws, ch, 10*time.Second)
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "echo-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "echo-p95-ms")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
