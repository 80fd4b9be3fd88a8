package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// BenchmarkVMIStartBurst creates 20 tiny VMIs 100 ms apart on the local cluster and reports
// create -> Running latency (from the VMIs' own phase transition timestamps), p50 and p95, then
// the per-VM overhead beyond guest memory: launcher RSS plus QEMU RSS minus guest memory.
func BenchmarkVMIStartBurst(b *testing.B) {
	c := localStack(b)
	cl := kv(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 20
	run := fmt.Sprintf("b%d", time.Now().Unix()%100000)
	var m map[string]any
	if err := yaml.Unmarshal([]byte(vmManifest("x", e2eNodes[0], "masquerade")), &m); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		vmi := &v1.VirtualMachineInstance{}
		tmpl, _ := yaml.Marshal(m["spec"].(map[string]any)["template"].(map[string]any)["spec"])
		if err := yaml.Unmarshal(tmpl, &vmi.Spec); err != nil {
			b.Fatal(err)
		}
		vmi.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": e2eNodes[i%2]}
		guest := *vmi.Spec.Domain.Memory.Guest
		guest.Set(128 << 20)
		vmi.Spec.Domain.Memory.Guest = &guest
		vmi.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", run, i), Namespace: "default", Labels: map[string]string{"bench": run}}
		if err := cl.Create(ctx, vmi); err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var lat []time.Duration
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var list v1.VirtualMachineInstanceList
		if err := cl.List(ctx, &list, client.MatchingLabels{"bench": run}); err != nil {
			return false, nil
		}
		lat = lat[:0]
		for _, vmi := range list.Items {
			for _, pt := range vmi.Status.PhaseTransitionTimestamps {
				if pt.Phase == v1.Running {
					lat = append(lat, pt.PhaseTransitionTimestamp.Sub(vmi.CreationTimestamp.Time))
				}
			}
		}
		return len(lat) == n, nil
	})
	if err != nil {
		b.Fatalf("only %d of %d VMIs reached Running", len(lat), n)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	// Timestamps have second resolution on the wire: report what they allow.
	b.ReportMetric(lat[n/2].Seconds(), "create-to-running-p50-s")
	b.ReportMetric(lat[n*95/100].Seconds(), "create-to-running-p95-s")

	// Overhead of one VM beyond its 128 MiB of guest memory, once guests have booted.
	time.Sleep(20 * time.Second)
	var list v1.VirtualMachineInstanceList
	_ = cl.List(ctx, &list, client.MatchingLabels{"bench": run})
	var total float64
	var counted int
	for _, vmi := range list.Items {
		dir := filepath.Join(c.VMDirRoot(), string(vmi.UID))
		var rss uint64
		for _, pid := range processesWith(dir + "/") {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(cmd), "virt-launcher") || strings.HasPrefix(string(cmd), "qemu-system") {
				rss += rssOf(b, pid)
			}
		}
		if rss > 0 {
			total += float64(rss) - 128<<20
			counted++
		}
	}
	if counted > 0 {
		b.ReportMetric(total/float64(counted)/(1<<20), "overhead-MiB-per-vm")
	}
	for _, vmi := range list.Items {
		_ = cl.Delete(ctx, &vmi)
	}
}
