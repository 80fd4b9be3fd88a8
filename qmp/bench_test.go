package qmp

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkQueryStatus measures query-status round trips against a real,
// paused QEMU. Percentiles cover at least 1000 calls, also with -benchtime 1x.
func BenchmarkQueryStatus(b *testing.B) {
	vm := startQEMU(b)
	c := vm.client
	ctx := context.Background()

	const minSamples = 1000
	lat := make([]time.Duration, 0, minSamples)
	call := func() {
		start := time.Now()
		if _, err := c.Status(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	for b.Loop() {
		call()
	}
	for len(lat) < minSamples {
		call()
	}

	slices.Sort(lat)
	b.ReportMetric(micros(percentile(lat, 50)), "p50-us")
	b.ReportMetric(micros(percentile(lat, 99)), "p99-us")
}

// percentile returns the p-th percentile of sorted samples (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func micros(d time.Duration) float64 {
	return float64(d) / float64(time.Microsecond)
}
