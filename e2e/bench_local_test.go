package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// BenchmarkVMIStartBurst creates 20 tiny VMIs 100 ms apart on one node of the local cluster and
// reports, as a client polling every 100 ms observes them: create -> Running p50/p95, launcher
// pod bound -> Ready p50/p95, the scrape time of that node agent with 20 VMs, and the per-VM
// overhead beyond guest memory (launcher RSS + QEMU RSS - guest memory).
func BenchmarkVMIStartBurst(b *testing.B) {
	c := localStack(b)
	cl := kv(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 20
	node := e2eNodes[0]
	run := fmt.Sprintf("b%d", time.Now().Unix()%100000)
	var m map[string]any
	if err := yaml.Unmarshal([]byte(vmManifest("x", node, "masquerade")), &m); err != nil {
		b.Fatal(err)
	}
	tmpl, _ := yaml.Marshal(m["spec"].(map[string]any)["template"].(map[string]any)["spec"])
	created := map[string]time.Time{}
	for i := 0; i < n; i++ {
		vmi := &v1.VirtualMachineInstance{}
		if err := yaml.Unmarshal(tmpl, &vmi.Spec); err != nil {
			b.Fatal(err)
		}
		guest := resource.MustParse("128Mi")
		vmi.Spec.Domain.Memory.Guest = &guest
		vmi.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", run, i), Namespace: "default", Labels: map[string]string{"bench": run}}
		created[vmi.Name] = time.Now()
		if err := cl.Create(ctx, vmi); err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	running, bound, ready := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	for len(running) < n || len(ready) < n {
		if ctx.Err() != nil {
			b.Fatalf("only %d of %d VMIs reached Running", len(running), n)
		}
		now := time.Now()
		var list v1.VirtualMachineInstanceList
		if err := cl.List(ctx, &list, client.MatchingLabels{"bench": run}); err == nil {
			for _, vmi := range list.Items {
				if _, seen := running[vmi.Name]; !seen && vmi.Status.Phase == v1.Running {
					running[vmi.Name] = now
				}
			}
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.MatchingLabels{"bench": run}); err == nil {
			for _, p := range pods.Items {
				if _, seen := bound[p.Name]; !seen && p.Spec.NodeName != "" {
					bound[p.Name] = now
				}
				if _, seen := ready[p.Name]; !seen && podReady(&p) {
					ready[p.Name] = now
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var toRunning, podStart []time.Duration
	for name, t := range running {
		toRunning = append(toRunning, t.Sub(created[name]))
	}
	for name, t := range ready {
		podStart = append(podStart, t.Sub(bound[name]))
	}
	report := func(d []time.Duration, unit string) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(d[len(d)/2].Seconds(), unit+"-p50-s")
		b.ReportMetric(d[len(d)*95/100].Seconds(), unit+"-p95-s")
	}
	report(toRunning, "create-to-running")
	report(podStart, "pod-bound-to-ready")

	time.Sleep(15 * time.Second) // the guests boot; the stats cache fills
	addr := handlerMetrics(b, c, node)
	t0 := time.Now()
	const scrapes = 10
	for i := 0; i < scrapes; i++ {
		if !strings.Contains(scrape(b, addr), run) {
			b.Fatal("scrape lacks the burst's VMs")
		}
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/scrapes/1000, "scrape-20-vms-ms")

	var list v1.VirtualMachineInstanceList
	_ = cl.List(ctx, &list, client.MatchingLabels{"bench": run})
	var total float64
	var counted int
	for _, vmi := range list.Items {
		var rss uint64
		for _, pid := range vmProcesses(b, c, &vmi) {
			rss += rssOf(b, pid)
		}
		if rss > 0 {
			total += float64(rss) - 128<<20
			counted++
		}
	}
	if counted > 0 {
		b.ReportMetric(total/float64(counted)/(1<<20), "overhead-MiB-per-vm")
	}
	for i := range list.Items {
		_ = cl.Delete(ctx, &list.Items[i])
	}
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
