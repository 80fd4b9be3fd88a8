package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qvirt/qvirt/internal/promreg"
)

// StreamMetrics count the open console, VNC and port-forward streams by VMI, with KubeVirt's
// virt-api families.
type StreamMetrics struct {
	console, vnc, portForward *prometheus.GaugeVec
}

// NewStreamMetrics registers the families with reg; a second registration in the same process
// shares the first one's gauges.
func NewStreamMetrics(reg prometheus.Registerer) (*StreamMetrics, error) {
	gauge := func(name, help string) (*prometheus.GaugeVec, error) {
		return promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"namespace", "vmi"}))
	}
	var m StreamMetrics
	var err error
	if m.console, err = gauge("kubevirt_console_active_connections", "Amount of active Console connections, broken down by namespace and vmi name."); err != nil {
		return nil, err
	}
	if m.vnc, err = gauge("kubevirt_vnc_active_connections", "Amount of active VNC connections, broken down by namespace and vmi name."); err != nil {
		return nil, err
	}
	if m.portForward, err = gauge("kubevirt_portforward_active_tunnels", "Amount of active portforward tunnels, broken down by namespace and vmi name."); err != nil {
		return nil, err
	}
	return &m, nil
}

// StreamKind is what a stream reaches.
type StreamKind int

const (
	ConsoleStream StreamKind = iota
	VNCStream
	PortForwardStream
	// VSOCKStream has no family of KubeVirt's.
	VSOCKStream
)

// Open counts one stream of kind to the VMI until the returned func is called.
func (m *StreamMetrics) Open(kind StreamKind, namespace, vmi string) (closed func()) {
	if m == nil {
		return func() {}
	}
	vec := map[StreamKind]*prometheus.GaugeVec{ConsoleStream: m.console, VNCStream: m.vnc, PortForwardStream: m.portForward}[kind]
	if vec == nil {
		return func() {}
	}
	g := vec.WithLabelValues(namespace, vmi)
	g.Inc()
	return g.Dec
}
