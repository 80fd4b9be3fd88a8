package vm

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// BenchmarkStartLatency measures QEMU exec -> QMP ready -> cont over 20 starts of the test
// guest and reports p50/p95 in milliseconds. The guest is killed right after cont: only the
// launcher's part of start-up is measured, not the guest's boot.
func BenchmarkStartLatency(b *testing.B) {
	testenv.RequireQEMU(b)
	g := testenv.RequireGuest(b)
	const runs = 20
	var toQMP, toCont []time.Duration
	for i := 0; i < runs; i++ {
		v := New(Config{Dir: filepath.Join(b.TempDir(), "vm")})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := v.Start(ctx, guestSpec(g, "bench")); err != nil {
			cancel()
			b.Fatal(err)
		}
		var qmpReady, cont time.Duration
		counting := false
		for _, p := range v.StartTimings() {
			if p.Name == "start-qemu" {
				counting = true
			}
			if !counting {
				continue
			}
			cont += p.Took
			if p.Name == "start-qemu" || p.Name == "connect-qmp" {
				qmpReady += p.Took
			}
		}
		toQMP, toCont = append(toQMP, qmpReady), append(toCont, cont)
		_ = v.Kill(ctx)
		cancel()
	}
	b.ReportMetric(ms(pct(toQMP, 50)), "qmp-ready-p50-ms")
	b.ReportMetric(ms(pct(toQMP, 95)), "qmp-ready-p95-ms")
	b.ReportMetric(ms(pct(toCont, 50)), "exec-to-cont-p50-ms")
	b.ReportMetric(ms(pct(toCont, 95)), "exec-to-cont-p95-ms")
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := (len(s)*p + 99) / 100
	if idx > 0 {
		idx--
	}
	return s[idx]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
