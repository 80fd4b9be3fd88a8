// Package virtapi assembles virt-api: the admission webhooks and the aggregated subresource
// API on one TLS listener, with configuration followed from the KubeVirt CR.
package virtapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/qvirt/qvirt/control/api"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/webhooks"
	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/internal/restmetrics"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// Options configure virt-api.
type Options struct {
	REST      *rest.Config
	Namespace string
	Listen    string
	// ReusePort lets several replicas listen on one address; the kernel spreads connections
	// across them (local mode runs two virt-api processes behind one service).
	ReusePort bool

	TLSCertFile, TLSKeyFile string

	RequestHeaderCAFile       string
	RequestHeaderAllowedNames []string

	NodeCAFile, NodeClientCertFile, NodeClientKeyFile string

	// Privileged users and groups may edit VMI status and reserved labels (the components).
	PrivilegedUsers, PrivilegedGroups []string

	// Limits bound the server (DefaultLimits when zero). MaxWebhookBodyBytes caps an
	// admission review (webhooks.DefaultMaxReviewBytes when zero), MaxRequestBodyBytes a
	// subresource request's body (api.DefaultMaxBodyBytes when zero).
	Limits                                   httplimit.Limits
	MaxWebhookBodyBytes, MaxRequestBodyBytes int64

	Log logr.Logger
}

// DefaultLimits are virt-api's server limits unless configured otherwise. Its clients are the
// kube-apiserver (admission reviews, and the aggregation layer's proxied subresource requests)
// and the kubelet's probes; a webhook is given at most 30 s by the API server.
func DefaultLimits() httplimit.Limits {
	return httplimit.Limits{
		ReadHeaderTimeout:  10 * time.Second,
		ReadTimeout:        30 * time.Second,
		WriteTimeout:       60 * time.Second,
		IdleTimeout:        90 * time.Second,
		MaxHeaderBytes:     1 << 20,
		MaxInFlight:        400,
		MaxStreams:         512,
		RetryAfter:         time.Second,
		StreamWriteTimeout: 30 * time.Second,
	}
}

// Run serves until ctx ends. It returns after the listener is bound and serving fails, or
// after a clean shutdown.
func Run(ctx context.Context, o Options) error {
	return run(ctx, o, o.Log, make(chan net.Addr, 1))
}

// Start is Run in the background; it returns the bound address once serving.
func Start(ctx context.Context, o Options) (net.Addr, <-chan error, error) {
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, o, o.Log, ready) }()
	select {
	case addr := <-ready:
		return addr, errc, nil
	case err := <-errc:
		return nil, nil, err
	}
}

func run(ctx context.Context, o Options, log logr.Logger, ready chan<- net.Addr) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.REST = rest.CopyConfig(o.REST)
	if err := restmetrics.Instrument(o.REST, reg); err != nil {
		return err
	}
	watcher, err := config.NewWatcher(o.REST, o.Namespace, config.VirtAPI, log.WithName("config"))
	if err != nil {
		return err
	}
	if err := watcher.Start(ctx); err != nil {
		return fmt.Errorf("watch KubeVirt configuration: %w", err)
	}
	cur := watcher.Current()
	clients, err := api.NewReloadingClients(o.REST, cur.QPS, cur.Burst)
	if err != nil {
		return err
	}
	watcher.OnChange(func(s config.Snapshot) {
		if err := clients.SetRateLimit(s.QPS, s.Burst); err != nil {
			log.Error(err, "applying new client rate limits")
		}
	})
	sarClient, err := newSARClient(ctx, o, log)
	if err != nil {
		return err
	}

	serving, err := tlsfiles.NewKeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	rhCA, err := tlsfiles.NewCAPool(o.RequestHeaderCAFile)
	if err != nil {
		return fmt.Errorf("requestheader CA: %w", err)
	}
	nodeCA, err := tlsfiles.NewCAPool(o.NodeCAFile)
	if err != nil {
		return fmt.Errorf("node agent CA: %w", err)
	}
	nodeCert, err := tlsfiles.NewKeyPair(o.NodeClientCertFile, o.NodeClientKeyFile)
	if err != nil {
		return fmt.Errorf("node agent client certificate: %w", err)
	}
	nodeClient := nodeapi.NewClient(func() (*tls.Config, error) {
		return tlsfiles.ClientConfig(nodeCert, nodeCA, "")
	})

	if o.Limits == (httplimit.Limits{}) {
		o.Limits = DefaultLimits()
	}
	streams, err := api.NewStreamMetrics(reg)
	if err != nil {
		return err
	}
	sub := api.NewServer(api.Options{
		Clients:            clients,
		Authn:              &api.RequestHeaderAuth{CA: rhCA, AllowedNames: o.RequestHeaderAllowedNames},
		Authz:              &api.SARAuthorizer{Client: func() kubernetes.Interface { return sarClient }},
		Nodes:              api.AnnotationResolver{Clients: clients},
		NodeClient:         nodeClient,
		MaxBodyBytes:       o.MaxRequestBodyBytes,
		StreamWriteTimeout: o.Limits.StreamWriteTimeout,
		Streams:            streams,
		Log:                log.WithName("subresources"),
	})
	hs := newHTTPServer(o.Limits, sub, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), watcher, webhooks.Options{
		Privileged:     webhooks.Privileges{Users: o.PrivilegedUsers, Groups: o.PrivilegedGroups},
		MaxReviewBytes: o.MaxWebhookBodyBytes,
		Migrations:     migrationLookup{kubevirt: clients.KubeVirt},
		Evictions:      evictionLookup{migrationLookup: migrationLookup{kubevirt: clients.KubeVirt}, kube: clients.Kube},
		Logger:         log.WithName("webhooks"),
	})

	var lc net.ListenConfig
	if o.ReusePort {
		lc.Control = reusePort
	}
	raw, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return err
	}
	l := tls.NewListener(raw, tlsfiles.ServerConfig(serving.GetCertificate, nil))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Info("virt-api serving", "address", l.Addr().String(), "privilegedUsers", strings.Join(o.PrivilegedUsers, ","))
	ready <- l.Addr()
	if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newSARClient is the client of the SubjectAccessReviews that authorize subresource requests,
// limited by the KubeVirt CR's webhookConfiguration as KubeVirt's is, followed live.
func newSARClient(ctx context.Context, o Options, log logr.Logger) (kubernetes.Interface, error) {
	w, err := config.NewWatcher(o.REST, o.Namespace, config.Webhooks, log.WithName("config-webhooks"))
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("watch KubeVirt configuration: %w", err)
	}
	cfg := rest.CopyConfig(o.REST)
	cfg.RateLimiter = w.RateLimiter()
	return kubernetes.NewForConfig(cfg)
}

// newHTTPServer serves the webhooks and the subresource API within lim. The kubelet's probes
// and Prometheus's scrapes are not counted against the caps: a busy virt-api must not look dead
// and be restarted, nor go dark to its monitoring.
func newHTTPServer(lim httplimit.Limits, sub, metrics http.Handler, cfg webhooks.Config, wopts webhooks.Options) *http.Server {
	limited := http.NewServeMux()
	webhooks.Register(limited, cfg, wopts)
	limited.Handle("/apis/", sub)
	hs := lim.Server(limited)
	mux := http.NewServeMux()
	mux.Handle("/", hs.Handler)
	// Probes for kubelet: no authentication, no dependencies.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.Handle("GET /metrics", metrics)
	hs.Handler = mux
	return hs
}

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
