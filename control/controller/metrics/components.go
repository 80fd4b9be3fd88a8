package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	controllerReady = prometheus.NewDesc("kubevirt_virt_controller_ready_status",
		"Indication for a virt-controller that is ready to take the lead.", nil, nil)
	controllerLeading = prometheus.NewDesc("kubevirt_virt_controller_leading_status",
		"Indication for an operating virt-controller.", nil, nil)
)

// ComponentCollector reports this replica's health as KubeVirt's virt-controller does: ready
// (its caches are synced, so it can take the lead) and leading. Every replica reports; the
// alert rules count them.
type ComponentCollector struct {
	mu             sync.Mutex
	ready, leading func() bool
}

// Use points the collector at a manager's checks; a manager started again in the same process
// (tests) takes the registered collector over.
func (c *ComponentCollector) Use(ready, leading func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready, c.leading = ready, leading
}

// Describe sends both families.
func (c *ComponentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- controllerReady
	ch <- controllerLeading
}

// Collect asks the checks now.
func (c *ComponentCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	ready, leading := c.ready, c.leading
	c.mu.Unlock()
	if ready == nil || leading == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(controllerReady, prometheus.GaugeValue, boolValue(ready()))
	ch <- prometheus.MustNewConstMetric(controllerLeading, prometheus.GaugeValue, boolValue(leading()))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
