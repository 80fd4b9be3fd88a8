// Package agent assembles virt-handler: the VMI controller of this node, the node API served
// to virt-api over mutual TLS, and the registration of that API on the Node object.
package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/internal/restmetrics"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/deviceplugin"
	"github.com/qvirt/qvirt/node/handler"
	vmimetrics "github.com/qvirt/qvirt/node/metrics"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/servingcert"
)

// schedulableLabel marks nodes whose node agent runs, as KubeVirt's virt-handler does.
const schedulableLabel = "kubevirt.io/schedulable"

// Options configure a node agent.
type Options struct {
	REST      *rest.Config
	NodeName  string
	Namespace string // of the KubeVirt CR
	// KubeletPodsDir is the kubelet's pod directory, where launcher pods' VM directories are.
	KubeletPodsDir string
	// LauncherUID owns the sockets in VM directories (see handler.Options).
	LauncherUID int
	Network     handler.Network

	// APIListen is where the node API listens; AdvertiseHost is the host virt-api dials.
	APIListen     string
	AdvertiseHost string
	// Serving certificate of the node API: from files, or when TLSCertFile is empty, issued
	// for this node through the certificates.k8s.io API (signer nodeapi.SignerName).
	TLSCertFile, TLSKeyFile string
	// ClientCAFile is the CA of virt-api's client certificate; ClientIdentities are the common
	// names accepted (nodeapi.DefaultClientIdentity).
	ClientCAFile     string
	ClientIdentities []string
	// NodeCAFile is the CA of node certificates: another node's agent shows one when it
	// sends or receives a migration. "" leaves this node out of migrations.
	NodeCAFile string

	// MetricsListen serves /metrics (kubevirt_vmi_* and the agent's own) over TLS with the node
	// API's serving certificate; "" disables it.
	MetricsListen string
	// StatsInterval is how often each VM's statistics are refreshed for scrapes.
	StatsInterval time.Duration

	// APILimits bound the node API's server (nodeapi.DefaultLimits when zero).
	APILimits httplimit.Limits
	// LauncherCallTimeout and MaxPortForwardsPerVMI: see handler.Options.
	LauncherCallTimeout   time.Duration
	MaxPortForwardsPerVMI int

	// DevicePlugins offer this node's devices to launcher pods through the kubelet; nil
	// offers none.
	DevicePlugins *deviceplugin.Options

	Log logr.Logger
}

// Agent is a started node agent.
type Agent struct {
	Handler  *handler.Handler
	APIAddr  net.Addr
	Manager  manager.Manager
	Config   *config.Watcher
	errc     chan error
	endpoint string
}

// Start runs the node agent until ctx ends; it returns once the node API listens.
func Start(ctx context.Context, o Options) (*Agent, error) {
	log := o.Log.WithValues("node", o.NodeName)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	watcher, err := config.NewWatcher(o.REST, o.Namespace, config.VirtHandler, log.WithName("config"))
	if err != nil {
		return nil, err
	}
	if err := watcher.Start(ctx); err != nil {
		return nil, fmt.Errorf("watch KubeVirt configuration: %w", err)
	}
	rc := rest.CopyConfig(o.REST)
	// Shared by every client below, and replaced when the CR's handlerConfiguration changes.
	rc.RateLimiter = watcher.RateLimiter()
	if err := restmetrics.Instrument(rc, crmetrics.Registry); err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	getCert, err := servingCertificate(ctx, o, kube, log)
	if err != nil {
		return nil, fmt.Errorf("node API serving certificate: %w", err)
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: scheme,
		Logger: log,
		// /metrics over TLS, as KubeVirt's: the node's own serving certificate, so a scraper
		// that trusts the node CA can check it reached this node.
		Metrics: metricsserver.Options{BindAddress: orDisabled(o.MetricsListen), SecureServing: true,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = getCert }}},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only this node's pods: a node agent never needs the rest of the cluster's.
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", o.NodeName)},
		}},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	migration, err := migrationOptions(o, getCert, func() config.Migrations { return watcher.Current().Migrations })
	if err != nil {
		return nil, err
	}
	h := handler.New(mgr.GetClient(), handler.Options{
		NodeName: o.NodeName, KubeletPodsDir: o.KubeletPodsDir, LauncherUID: o.LauncherUID, Network: o.Network,
		UseEmulation:          func() bool { return watcher.Current().UseEmulation },
		LauncherCallTimeout:   o.LauncherCallTimeout,
		MaxPortForwardsPerVMI: o.MaxPortForwardsPerVMI,
		Migration:             migration,
		Log:                   log.WithName("handler"),
	})
	if err := h.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = 10 * time.Second
	}
	crmetrics.Registry.MustRegister(vmimetrics.NewCollector(o.NodeName, h))
	if err := mgr.Add(handler.StatsPoller{H: h, Interval: o.StatsInterval}); err != nil {
		return nil, err
	}
	if o.DevicePlugins != nil {
		dpo := *o.DevicePlugins
		dpo.Log = log.WithName("deviceplugin")
		if err := mgr.Add(deviceplugin.NewManager(dpo, func() []deviceplugin.Device { return offeredDevices(watcher.Current()) })); err != nil {
			return nil, err
		}
	}

	l, err := listenNodeAPI(o, getCert)
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	a := &Agent{Handler: h, APIAddr: l.Addr(), Manager: mgr, Config: watcher, errc: make(chan error, 2),
		endpoint: fmt.Sprintf("https://%s", net.JoinHostPort(o.AdvertiseHost, fmt.Sprint(port)))}
	if o.APILimits == (httplimit.Limits{}) {
		o.APILimits = nodeapi.DefaultLimits()
	}
	hs := nodeapi.NewServer(h.Backend(), log.WithName("nodeapi"), o.APILimits)
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.errc <- err
		}
	}()
	go func() { a.errc <- mgr.Start(ctx) }()

	go a.advertise(ctx, kube, o.NodeName, log)
	log.Info("node agent started", "nodeAPI", a.endpoint)
	return a, nil
}

// Done reports the first fatal error (or nil after a clean stop).
func (a *Agent) Done() <-chan error { return a.errc }

// migrationOptions let the handler carry migrations with this node's certificate, trusting the
// node CA for the other end.
func migrationOptions(o Options, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), settings func() config.Migrations) (*handler.MigrationOptions, error) {
	if o.NodeCAFile == "" {
		return nil, nil
	}
	cas, err := tlsfiles.NewCAPool(o.NodeCAFile)
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	return &handler.MigrationOptions{AdvertiseHost: o.AdvertiseHost, NodeCAs: cas.Pool, Settings: settings,
		Certificate: func() (*tls.Certificate, error) { return getCert(nil) }}, nil
}

// listenNodeAPI serves mutual TLS to virt-api only: its client certificate's CA and name are
// both checked.
func listenNodeAPI(o Options, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) (net.Listener, error) {
	cas, err := tlsfiles.NewCAPool(o.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("node API client CA: %w", err)
	}
	ids := o.ClientIdentities
	if len(ids) == 0 {
		ids = []string{nodeapi.DefaultClientIdentity}
	}
	cfg := tlsfiles.ServerConfig(getCert, cas)
	cfg.VerifyConnection = nodeapi.RequireClientIdentity(ids...)
	return tls.Listen("tcp", o.APIListen, cfg)
}

func servingCertificate(ctx context.Context, o Options, kube kubernetes.Interface, log logr.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if o.TLSCertFile != "" {
		kp, err := tlsfiles.NewKeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		return kp.GetCertificate, nil
	}
	log.Info("requesting the node API serving certificate", "signer", nodeapi.SignerName)
	src, err := servingcert.Start(ctx, servingcert.Options{Kube: kube, NodeName: o.NodeName})
	if err != nil {
		return nil, err
	}
	return src.GetCertificate, nil
}

// advertise writes the node API endpoint on the Node so virt-api can find this agent, and marks
// the node schedulable for VMs. The
// Node may not exist yet (the kubelet registers it): keep trying.
func (a *Agent) advertise(ctx context.Context, kube kubernetes.Interface, node string, log logr.Logger) {
	// The label is what launcher pods select: a node is schedulable for VMs once its agent runs.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{nodeapi.EndpointAnnotation: a.endpoint},
		"labels":      map[string]string{schedulableLabel: "true"},
	}})
	_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			log.Info("node API advertised", "endpoint", a.endpoint)
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		default:
			log.Error(err, "advertising the node API")
			return false, nil
		}
	})
}

// offeredDevices are KubeVirt's: the permanent ones, and vhost-vsock while the VSOCK gate is on.
func offeredDevices(cfg config.Snapshot) []deviceplugin.Device {
	devs := append([]deviceplugin.Device(nil), deviceplugin.Permanent...)
	if cfg.FeatureGateEnabled(featureGateVSOCK) {
		devs = append(devs, deviceplugin.VhostVsock)
	}
	return devs
}

// featureGateVSOCK is KubeVirt's gate of autoattachVSOCK.
const featureGateVSOCK = "VSOCK"

func orDisabled(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}
