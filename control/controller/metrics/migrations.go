package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// MigrationPhaseTransitionFromCreationName is KubeVirt's name for the migration phase histogram.
const MigrationPhaseTransitionFromCreationName = "kubevirt_vmi_migration_phase_transition_time_from_creation_seconds"

var (
	migrationsInPhase = map[string]*prometheus.Desc{
		"pending":    prometheus.NewDesc("kubevirt_vmi_migrations_in_pending_phase", "Number of current pending migrations.", nil, nil),
		"scheduling": prometheus.NewDesc("kubevirt_vmi_migrations_in_scheduling_phase", "Number of current scheduling migrations.", nil, nil),
		"running":    prometheus.NewDesc("kubevirt_vmi_migrations_in_running_phase", "Number of current running migrations.", nil, nil),
		"unset": prometheus.NewDesc("kubevirt_vmi_migrations_in_unset_phase",
			"Number of current unset migrations. These are pending items the virt-controller hasn't processed yet from the queue.", nil, nil),
	}
	migrationSucceeded = prometheus.NewDesc("kubevirt_vmi_migration_succeeded", "Indicates if the VMI migration succeeded.", []string{"vmi", "vmim", "namespace"}, nil)
	migrationFailed    = prometheus.NewDesc("kubevirt_vmi_migration_failed", "Indicates if the VMI migration failed.", []string{"vmi", "vmim", "namespace"}, nil)
	migrationStart     = prometheus.NewDesc("kubevirt_vmi_migration_start_time_seconds", "The time at which the migration started.",
		[]string{"node", "namespace", "name", "migration_name"}, nil)
	migrationEnd = prometheus.NewDesc("kubevirt_vmi_migration_end_time_seconds", "The time at which the migration ended.",
		[]string{"node", "namespace", "name", "migration_name", "status"}, nil)
)

// leaderCache is what a collector of cluster-wide families reads: the controller's cache, while
// this replica leads, so that a sum over the replicas counts each object once.
type leaderCache struct {
	mu      sync.Mutex
	reader  client.Reader
	leading func() bool
	log     logr.Logger
}

// Use makes the collector read reader while leading reports true (nil: always). A manager
// started again in the same process (tests) takes the registered collector over.
func (c *leaderCache) Use(reader client.Reader, leading func() bool, log logr.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader, c.leading, c.log = reader, leading, log
}

// current returns the reader to collect from, or nil when this replica does not report.
func (c *leaderCache) current() (client.Reader, logr.Logger) {
	c.mu.Lock()
	reader, leading, log := c.reader, c.leading, c.log
	c.mu.Unlock()
	if reader == nil || (leading != nil && !leading()) {
		return nil, log
	}
	return reader, log
}

// MigrationCollector reports KubeVirt's migration families from the controller's cache at each
// scrape: how many migrations are in which phase, each ended migration's outcome, and each VMI's
// last migration start and end.
type MigrationCollector struct{ leaderCache }

// Describe sends every family.
func (c *MigrationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range migrationsInPhase {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{migrationSucceeded, migrationFailed, migrationStart, migrationEnd} {
		ch <- d
	}
}

// Collect reads migrations and VMIs from the cache.
func (c *MigrationCollector) Collect(ch chan<- prometheus.Metric) {
	reader, log := c.current()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var migs virtv1.VirtualMachineInstanceMigrationList
	if err := reader.List(ctx, &migs); err != nil {
		log.Error(err, "Listing migrations for metrics")
		return
	}
	counts := map[string]float64{"pending": 0, "scheduling": 0, "running": 0, "unset": 0}
	names := map[types.UID]string{}
	for i := range migs.Items {
		m := &migs.Items[i]
		names[m.UID] = m.Name
		switch m.Status.Phase {
		case virtv1.MigrationPhaseUnset:
			counts["unset"]++
		case virtv1.MigrationPending:
			counts["pending"]++
		case virtv1.MigrationScheduling:
			counts["scheduling"]++
		case virtv1.MigrationScheduled, virtv1.MigrationPreparingTarget, virtv1.MigrationTargetReady, virtv1.MigrationRunning:
			counts["running"]++
		case virtv1.MigrationSucceeded:
			ch <- prometheus.MustNewConstMetric(migrationSucceeded, prometheus.GaugeValue, 1, m.Spec.VMIName, m.Name, m.Namespace)
		case virtv1.MigrationFailed:
			ch <- prometheus.MustNewConstMetric(migrationFailed, prometheus.GaugeValue, 1, m.Spec.VMIName, m.Name, m.Namespace)
		}
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(migrationsInPhase[k], prometheus.GaugeValue, v)
	}

	var vmis virtv1.VirtualMachineInstanceList
	if err := reader.List(ctx, &vmis); err != nil {
		log.Error(err, "Listing VMIs for metrics")
		return
	}
	for i := range vmis.Items {
		v := &vmis.Items[i]
		s := v.Status.MigrationState
		if s == nil {
			continue
		}
		name, ok := names[s.MigrationUID]
		if !ok {
			name = "<none>"
		}
		if s.StartTimestamp != nil {
			ch <- prometheus.MustNewConstMetric(migrationStart, prometheus.GaugeValue, float64(s.StartTimestamp.Unix()), v.Status.NodeName, v.Namespace, v.Name, name)
		}
		if s.EndTimestamp != nil {
			ch <- prometheus.MustNewConstMetric(migrationEnd, prometheus.GaugeValue, float64(s.EndTimestamp.Unix()), v.Status.NodeName, v.Namespace, v.Name, name, migrationOutcome(s))
		}
	}
}

// migrationOutcome is KubeVirt's status label of an ended migration.
func migrationOutcome(s *virtv1.VirtualMachineInstanceMigrationState) string {
	switch {
	case s.Failed:
		return "failed"
	case s.Completed:
		return "succeeded"
	}
	return ""
}

// ObserveMigrationPhase records how long after its creation mig reached its current phase, by
// the migration's own transition timestamp when it has one.
func (m *Metrics) ObserveMigrationPhase(mig *virtv1.VirtualMachineInstanceMigration, now time.Time) {
	phase := mig.Status.Phase
	if phase == "" || mig.CreationTimestamp.IsZero() {
		return
	}
	at := now
	for _, ts := range mig.Status.PhaseTransitionTimestamps {
		if ts.Phase == phase && !ts.PhaseTransitionTimestamp.IsZero() {
			at = ts.PhaseTransitionTimestamp.Time
		}
	}
	m.migrationPhaseFromCreation.WithLabelValues(string(phase)).Observe(max(at.Sub(mig.CreationTimestamp.Time).Seconds(), 0))
}

// MigrationPhaseHandler observes every phase change of a watched migration. It never enqueues.
func (m *Metrics) MigrationPhaseHandler() handler.TypedEventHandler[*virtv1.VirtualMachineInstanceMigration, reconcile.Request] {
	return handler.TypedFuncs[*virtv1.VirtualMachineInstanceMigration, reconcile.Request]{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*virtv1.VirtualMachineInstanceMigration], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.Status.Phase != e.ObjectNew.Status.Phase {
				m.ObserveMigrationPhase(e.ObjectNew, time.Now())
			}
		},
	}
}
