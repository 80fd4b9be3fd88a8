// Package metrics holds virt-controller's own Prometheus metrics.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/promreg"
)

// PhaseTransitionFromCreationName is KubeVirt's metric name; dashboards built
// for KubeVirt query it.
const PhaseTransitionFromCreationName = "kubevirt_vmi_phase_transition_time_from_creation_seconds"

// phaseTransitionBuckets are KubeVirt's: from half a second (a fast start)
// up to an hour (a large image pull).
var phaseTransitionBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 90, 120, 180, 240, 300, 600, 1200, 1800, 3600}

// Metrics are the collectors of one controller process.
type Metrics struct {
	phaseFromCreation          *prometheus.HistogramVec
	migrationPhaseFromCreation *prometheus.HistogramVec
}

// New creates the collectors and registers them with reg. Registering twice in
// one process (tests start several managers) reuses the first collectors.
func New(reg prometheus.Registerer) (*Metrics, error) {
	vmi, err := promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    PhaseTransitionFromCreationName,
		Help:    "Histogram of VM phase transitions duration from creation time in seconds.",
		Buckets: phaseTransitionBuckets,
	}, []string{"phase"}))
	if err != nil {
		return nil, err
	}
	mig, err := promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MigrationPhaseTransitionFromCreationName,
		Help:    "Histogram of VM migration phase transitions duration from creation time in seconds.",
		Buckets: phaseTransitionBuckets,
	}, []string{"phase"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{phaseFromCreation: vmi, migrationPhaseFromCreation: mig}, nil
}

// ObservePhaseTransition records how long after its creation vmi reached its
// current phase. The time comes from the VMI's own transition timestamp when it
// has one, so that a late observer does not inflate the number.
func (m *Metrics) ObservePhaseTransition(vmi *virtv1.VirtualMachineInstance, now time.Time) {
	phase := vmi.Status.Phase
	if phase == "" || vmi.CreationTimestamp.IsZero() {
		return
	}
	at := now
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == phase && !ts.PhaseTransitionTimestamp.IsZero() {
			at = ts.PhaseTransitionTimestamp.Time
		}
	}
	d := at.Sub(vmi.CreationTimestamp.Time).Seconds()
	if d < 0 {
		d = 0
	}
	m.phaseFromCreation.WithLabelValues(string(phase)).Observe(d)
}

// PhaseTransitionHandler observes every phase change of a watched VMI,
// whoever made it (this controller or the node agent). It never enqueues.
func (m *Metrics) PhaseTransitionHandler() handler.TypedEventHandler[*virtv1.VirtualMachineInstance, reconcile.Request] {
	return handler.TypedFuncs[*virtv1.VirtualMachineInstance, reconcile.Request]{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*virtv1.VirtualMachineInstance], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.Status.Phase != e.ObjectNew.Status.Phase {
				m.ObservePhaseTransition(e.ObjectNew, time.Now())
			}
		},
	}
}
