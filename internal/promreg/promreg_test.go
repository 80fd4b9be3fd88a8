package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterReusesTheFirstCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.GaugeOpts{Name: "x_total", Help: "x"}
	first, err := Register(reg, prometheus.NewGaugeVec(opts, []string{"a"}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Register(reg, prometheus.NewGaugeVec(opts, []string{"a"}))
	if err != nil || second != first {
		t.Fatalf("second registration: %p %v, want the first %p", second, err, first)
	}
	// Another type under the same name is a real conflict.
	if _, err := Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})); err == nil {
		t.Fatal("a conflicting collector was accepted")
	}
}
