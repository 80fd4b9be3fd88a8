// Package controller assembles virt-controller: the VM, VMI and migration
// controllers in one leader-elected controller-runtime manager, with health
// probes and Prometheus metrics.
package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	qvconfig "github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
	"github.com/qvirt/qvirt/control/controller/metrics"
	"github.com/qvirt/qvirt/control/controller/migration"
	"github.com/qvirt/qvirt/control/controller/nodecerts"
	"github.com/qvirt/qvirt/control/controller/vm"
	"github.com/qvirt/qvirt/control/controller/vmi"
	"github.com/qvirt/qvirt/internal/restmetrics"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// LeaseName is the leader election lease in the install namespace.
const LeaseName = "virt-controller"

// Options configure virt-controller. The zero value of a field means its default.
type Options struct {
	// Namespace is the install namespace, where the leader lease lives
	// ("kubevirt").
	Namespace string
	// DisableLeaderElection runs the controllers without a lease; only for a
	// single replica (tests, local mode).
	DisableLeaderElection bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (client-go's 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsBindAddress serves /metrics (":8443"); "0" turns it off.
	MetricsBindAddress string
	// MetricsInsecure serves metrics over plain HTTP; by default they are served over HTTPS, as
	// KubeVirt's are, with the certificate in MetricsCertDir (tls.crt, tls.key, reloaded when
	// they change) or, when that is empty, a self-signed one made at start.
	MetricsInsecure bool
	MetricsCertDir  string
	// HealthProbeBindAddress serves /healthz and /readyz (":8081"); "0" turns
	// it off.
	HealthProbeBindAddress string
	// Pods configure the launcher pods.
	Pods launcherpod.Options
	// Migrations limit concurrent migrations (KubeVirt's 5 per cluster, 2 per node).
	Migrations migration.Limits
	// VMWorkers and VMIWorkers are the parallel reconciles (3 and 5).
	VMWorkers, VMIWorkers int
	// NodeCA signs node agents' serving certificates (certificate and key, re-read per request);
	// nil leaves such requests to another signer.
	NodeCA func() (*tls.Certificate, error)
	// NodeCertLifetime caps those certificates' lifetime (24 h).
	NodeCertLifetime time.Duration
	// Logger is the root logger; controller-runtime's global one when unset.
	Logger logr.Logger
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = "kubevirt"
	}
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = ":8443"
	}
	if o.HealthProbeBindAddress == "" {
		o.HealthProbeBindAddress = ":8081"
	}
	if o.Migrations == (migration.Limits{}) {
		o.Migrations = migration.DefaultLimits()
	}
	if o.VMWorkers <= 0 {
		o.VMWorkers = 3
	}
	if o.VMIWorkers <= 0 {
		o.VMIWorkers = 5
	}
	return o
}

// NewScheme knows core Kubernetes and kubevirt.io/v1 types.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := virtv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager builds the manager with every controller registered; Start runs
// it until its context ends.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	opts = opts.withDefaults()
	if err := opts.Pods.Validate(); err != nil {
		return nil, fmt.Errorf("launcher pod options: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if err := restmetrics.Instrument(cfg, ctrlmetrics.Registry); err != nil {
		return nil, err
	}
	// The client's rate limit is the KubeVirt CR's controllerConfiguration, followed live; the
	// watcher's own single watch goes through cfg as given.
	log := crlog.Log
	if opts.Logger.GetSink() != nil {
		log = opts.Logger
	}
	kvConfig, err := qvconfig.NewWatcher(cfg, opts.Namespace, qvconfig.VirtController, log.WithName("config"))
	if err != nil {
		return nil, err
	}
	limited := rest.CopyConfig(cfg)
	limited.RateLimiter = kvConfig.RateLimiter()
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}

	qvirtPods := labels.NewSelector()
	if req, err := labels.NewRequirement(virtv1.AppLabel, selection.In, []string{virtv1.VirtLauncherAppLabelValue, launcherpod.HotplugDiskAppLabelValue}); err == nil {
		qvirtPods = qvirtPods.Add(*req)
	}
	mopts := manager.Options{
		Scheme: scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only launcher and attachment pods matter; caching every pod would cost
			// memory in a large cluster.
			&corev1.Pod{}: {Label: qvirtPods},
			// Only the requests this controller signs.
			&certificatesv1.CertificateSigningRequest{}: {Field: fields.OneTermEqualSelector("spec.signerName", nodeapi.SignerName)},
			// The installation's CR only, as the config watcher reads it: a KubeVirt CR in
			// another namespace configures nothing.
			&virtv1.KubeVirt{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
		}},
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress, SecureServing: !opts.MetricsInsecure, CertDir: opts.MetricsCertDir},
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		LeaderElection:                !opts.DisableLeaderElection,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true, // the process ends with the manager, so a successor need not wait out the lease
		// Lease renewals must not queue behind a busy rate limit and lose the lease.
		LeaderElectionConfig: cfg,
		// Controller names are checked for uniqueness per process; a restarted
		// manager in the same process (tests, local mode) reuses them.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration = &opts.LeaseDuration
	}
	if opts.RenewDeadline > 0 {
		mopts.RenewDeadline = &opts.RenewDeadline
	}
	if opts.RetryPeriod > 0 {
		mopts.RetryPeriod = &opts.RetryPeriod
	}
	if opts.Logger.GetSink() != nil {
		mopts.Logger = opts.Logger
	}
	mgr, err := manager.New(limited, mopts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(configWatch{kvConfig}); err != nil {
		return nil, err
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr.GetCache())); err != nil {
		return nil, err
	}
	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return nil, err
	}
	recorder := mgr.GetEventRecorder("virtualmachine-controller")

	vmR := &vm.Reconciler{Client: mgr.GetClient(), Recorder: recorder}
	if err := vmR.SetupWithManager(mgr, opts.VMWorkers); err != nil {
		return nil, fmt.Errorf("VM controller: %w", err)
	}
	vmiR := &vmi.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Pods: opts.Pods}
	if err := vmiR.SetupWithManager(mgr, opts.VMIWorkers, m.PhaseTransitionHandler()); err != nil {
		return nil, fmt.Errorf("VMI controller: %w", err)
	}
	migR := &migration.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Pods: opts.Pods, Limits: opts.Migrations}
	if err := migR.SetupWithManager(context.Background(), mgr, m.MigrationPhaseHandler()); err != nil {
		return nil, fmt.Errorf("migration controller: %w", err)
	}
	if err := registerMigrationCollector(ctrlmetrics.Registry); err != nil {
		return nil, err
	}
	migrationCollector.Use(mgr.GetClient(), elected(mgr), mopts.Logger)
	objectCollector.Use(mgr.GetClient(), elected(mgr), mopts.Logger)
	componentCollector.Use(func() bool { return cachesSynced(mgr.GetCache())(&http.Request{}) == nil }, elected(mgr))
	evac := &migration.Evacuation{Client: mgr.GetClient(), Recorder: recorder, Namespace: opts.Namespace}
	if err := evac.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("evacuation controller: %w", err)
	}
	if opts.NodeCA != nil {
		certs := &nodecerts.Reconciler{Client: mgr.GetClient(), CA: opts.NodeCA,
			HandlerUser: nodecerts.HandlerUser(opts.Namespace), MaxLifetime: opts.NodeCertLifetime}
		if err := certs.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("node certificate signer: %w", err)
		}
	}
	return mgr, nil
}

// configWatch follows the KubeVirt CR in every replica, leader or not: a standby's caches use
// the limited client too.
type configWatch struct{ w *qvconfig.Watcher }

func (c configWatch) Start(ctx context.Context) error {
	if err := c.w.Start(ctx); err != nil {
		return fmt.Errorf("watch KubeVirt configuration: %w", err)
	}
	<-ctx.Done()
	return nil
}

func (configWatch) NeedLeaderElection() bool { return false }

// elected reports whether this replica leads.
func elected(mgr manager.Manager) func() bool {
	return func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
}

// The collectors are registered once per process; each manager points them at its cache.
var (
	migrationCollector     = &metrics.MigrationCollector{}
	componentCollector     = &metrics.ComponentCollector{}
	objectCollector        = &metrics.ObjectCollector{}
	migrationCollectorOnce sync.Once
	migrationCollectorErr  error
)

func registerMigrationCollector(reg prometheus.Registerer) error {
	migrationCollectorOnce.Do(func() {
		for _, c := range []prometheus.Collector{migrationCollector, componentCollector, objectCollector} {
			if migrationCollectorErr = reg.Register(c); migrationCollectorErr != nil {
				return
			}
		}
	})
	return migrationCollectorErr
}

// cachesSynced is ready once the informers have their first full list; a
// standby replica is ready too, so that a rollout does not wait for leadership.
func cachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("caches are not synced yet")
		}
		return nil
	}
}
