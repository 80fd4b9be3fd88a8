package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/stack"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BenchmarkWebhookLatency creates 200 VMs concurrently through the kube-apiserver and reports
// the admission webhooks' latency as the kube-apiserver measured it (its
// apiserver_admission_webhook_admission_duration_seconds histogram), plus the create round
// trip seen by the client.
func BenchmarkWebhookLatency(b *testing.B) {
	s := controlPlane(b)
	c := kvClient(b, s)
	kube, _ := kubernetes.NewForConfig(s.Cluster.RESTConfig())
	before := webhookHistogram(b, kube)
	const n = 200
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := fmt.Sprintf("%d", time.Now().UnixNano()%100000)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			vm := benchVM(fmt.Sprintf("wh-%s-%d", run, i), v1.RunStrategyHalted)
			t0 := time.Now()
			if err := c.Create(ctx, vm); err != nil {
				b.Error(err)
			}
			lat[i] = time.Since(t0)
		}(i)
	}
	wg.Wait()
	after := webhookHistogram(b, kube)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[n/2])/1e6, "create-p50-ms")
	b.ReportMetric(float64(lat[n*99/100])/1e6, "create-p99-ms")
	b.ReportMetric(quantile(before, after, 0.5)*1000, "webhook-p50-ms")
	b.ReportMetric(quantile(before, after, 0.99)*1000, "webhook-p99-ms")
}

func benchVM(name string, rs v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	return &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.VirtualMachineSpec{RunStrategy: &rs, Template: &v1.VirtualMachineInstanceTemplateSpec{
			Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: quantityPtr("128Mi")}}},
		}},
	}
}

func kvClient(tb testing.TB, s *stack.Stack) client.Client {
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	cfg := s.Cluster.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// webhookHistogram sums the kube-apiserver's webhook latency buckets over every qvirt webhook.
func webhookHistogram(tb testing.TB, kube kubernetes.Interface) map[float64]uint64 {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[float64]uint64{}
	mf := mfs["apiserver_admission_webhook_admission_duration_seconds"]
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		if !qvirtWebhook(m) {
			continue
		}
		for _, bk := range m.GetHistogram().GetBucket() {
			out[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
	}
	return out
}

func qvirtWebhook(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "name" && strings.HasSuffix(l.GetValue(), ".kubevirt.io") {
			return true
		}
	}
	return false
}

// quantile estimates a quantile of the observations between two histogram snapshots by
// linear interpolation inside the bucket, as Prometheus' histogram_quantile does.
func quantile(before, after map[float64]uint64, q float64) float64 {
	var bounds []float64
	for ub := range after {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	counts := make([]float64, len(bounds))
	for i, ub := range bounds {
		counts[i] = float64(after[ub] - before[ub])
	}
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		return 0
	}
	rank := q * counts[len(counts)-1]
	prevBound, prevCount := 0.0, 0.0
	for i, ub := range bounds {
		if counts[i] >= rank {
			if ub > 1e300 { // +Inf
				return prevBound
			}
			return prevBound + (ub-prevBound)*(rank-prevCount)/(counts[i]-prevCount)
		}
		prevBound, prevCount = ub, counts[i]
	}
	return prevBound
}

func quantityPtr(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
