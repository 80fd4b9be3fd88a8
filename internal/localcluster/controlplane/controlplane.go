// Package controlplane runs a real Kubernetes control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager) as local processes on loopback, with client-certificate authentication,
// Node+RBAC authorization and the aggregation layer configured. End-to-end tests and local mode use it;
// `make k8s` builds the binaries.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/proc"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure Start.
type Options struct {
	// Dir holds the cluster's state: pki/, etcd/, logs/<process>.log and the kubeconfigs. Required.
	// Starting again on the same Dir keeps the CAs, the service-account key and etcd's data.
	Dir string
	// BinDir holds the binaries named in Binaries. Empty means DefaultBinDir().
	BinDir string
	// Log receives progress; the zero value discards it.
	Log logr.Logger
	// ExtraAPIServerFlags are appended to kube-apiserver's command line, so they override the defaults.
	ExtraAPIServerFlags []string
	// BindAddress is where kube-apiserver listens and what it advertises; empty means 127.0.0.1.
	// Real nodes (kubelets in their own network namespaces) need an address they can reach: with
	// one, default/kubernetes gets that endpoint, and kube-apiserver reaches the kubelets (logs,
	// exec, port-forward) by their InternalIP with its own client certificate.
	BindAddress string
}

// Cluster is a running control plane. Its processes outlive the context given to Start; Stop ends them.
type Cluster struct {
	log    logr.Logger
	dir    string
	binDir string
	pki    *clusterPKI
	ports  ports
	bind   net.IP

	adminKubeconfig string
	restConfig      *rest.Config

	spawner *proc.Spawner
	procs   []*proc.Process // in start order

	stopOnce sync.Once
	stopErr  error
}

type ports struct {
	etcdClient, etcdPeer, apiServer, scheduler, controllerManager int
}

const (
	// startTimeout bounds Start when its context has no earlier deadline.
	startTimeout = 3 * time.Minute
	stopGrace    = 15 * time.Second
	pollInterval = 100 * time.Millisecond

	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// Start generates the PKI, starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
// free loopback ports, and returns once all of them report healthy. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	if opts.Dir == "" {
		return nil, errors.New("controlplane: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	}
	if err := checkBinaries(binDir); err != nil {
		return nil, fmt.Errorf("controlplane: run `make k8s`: %w", err)
	}
	for _, sub := range []string{"pki", "etcd", "logs", "users"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	c := &Cluster{log: opts.Log, dir: dir, binDir: binDir, bind: net.ParseIP("127.0.0.1")}
	if opts.BindAddress != "" {
		if c.bind = net.ParseIP(opts.BindAddress); c.bind == nil {
			return nil, fmt.Errorf("controlplane: BindAddress %q is not an IP address", opts.BindAddress)
		}
	}
	if c.pki, err = newPKI(filepath.Join(dir, "pki"), c.bind); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if c.ports, err = freePorts(); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if err := c.writeKubeconfigs(); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c.spawner = proc.NewSpawner()
	if err := c.startAll(ctx, opts.ExtraAPIServerFlags); err != nil {
		return nil, errors.Join(fmt.Errorf("controlplane: %w", err), c.Stop())
	}
	c.log.Info("control plane ready", "elapsed", time.Since(began).Round(time.Millisecond),
		"server", c.restConfig.Host, "kubeconfig", c.adminKubeconfig, "dir", dir)
	return c, nil
}

// startAll starts the processes in dependency order: the scheduler and the controller manager look up
// the authentication config map at startup and exit when the API server does not answer yet.
func (c *Cluster) startAll(ctx context.Context, extraAPIServerFlags []string) error {
	etcd, err := c.start("etcd", c.etcdArgs())
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d/health", c.ports.etcdClient)
	if err := c.waitHealthy(ctx, etcd, c.httpClient(nil), etcdURL); err != nil {
		return err
	}

	apiServer, err := c.start("kube-apiserver", append(c.apiServerArgs(), extraAPIServerFlags...))
	if err != nil {
		return err
	}
	admin, err := c.adminHTTPClient()
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, apiServer, admin, c.restConfig.Host+"/readyz"); err != nil {
		return err
	}

	scheduler, err := c.start("kube-scheduler", c.schedulerArgs())
	if err != nil {
		return err
	}
	controllerManager, err := c.start("kube-controller-manager", c.controllerManagerArgs())
	if err != nil {
		return err
	}
	// Both serve /healthz to anonymous clients; the CA check proves it is the process we started.
	anonymous := c.httpClient(nil)
	errs := make(chan error, 2)
	go func() {
		errs <- c.waitHealthy(ctx, scheduler, anonymous, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.scheduler))
	}()
	go func() {
		errs <- c.waitHealthy(ctx, controllerManager, anonymous, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.controllerManager))
	}()
	return errors.Join(<-errs, <-errs)
}

func (c *Cluster) start(name string, args []string) (*proc.Process, error) {
	p, err := proc.StartProcess(c.spawner, name, filepath.Join(c.binDir, name), c.logPath(name), args)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	c.log.V(1).Info("started", "process", name, "pid", p.Pid(), "log", p.LogPath)
	return p, nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

// waitHealthy polls url until it answers 200, the process exits, or ctx ends.
func (c *Cluster) waitHealthy(ctx context.Context, p *proc.Process, client *http.Client, url string) error {
	began := time.Now()
	var last error
	for {
		if !p.Running() {
			return p.ExitError()
		}
		if last = probe(ctx, client, url); last == nil {
			c.log.V(1).Info("healthy", "process", p.Name, "elapsed", time.Since(began).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s: %w (last probe: %v; log %s)", p.Name, url, ctx.Err(), last, p.LogPath)
		case <-p.Exited():
		case <-time.After(pollInterval):
		}
	}
}

func probe(ctx context.Context, client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

func (c *Cluster) httpClient(clientCert *tls.Certificate) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(c.pki.ca.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	// No proxy from the environment, and no idle connections left open to the processes.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

func (c *Cluster) adminHTTPClient() (*http.Client, error) {
	cert, err := tls.X509KeyPair(c.restConfig.CertData, c.restConfig.KeyData)
	if err != nil {
		return nil, err
	}
	return c.httpClient(&cert), nil
}

func freePorts() (ports, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	// All listeners stay open until every port is chosen, so no two are the same.
	next := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		listeners = append(listeners, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	var p ports
	for _, dst := range []*int{&p.etcdClient, &p.etcdPeer, &p.apiServer, &p.scheduler, &p.controllerManager} {
		port, err := next()
		if err != nil {
			return ports{}, fmt.Errorf("free loopback port: %w", err)
		}
		*dst = port
	}
	return p, nil
}

func (c *Cluster) pkiPath(name string) string { return c.pki.path(name) }

func (c *Cluster) etcdArgs() []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	return []string{
		"--name=qvirt-local",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=qvirt-local=" + peer,
		// A throwaway development store: skipping fsync makes API writes several times faster.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func (c *Cluster) apiServerArgs() []string {
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient),
		"--bind-address=" + c.bind.String(),
		"--advertise-address=" + c.bind.String(),
	}
	if c.bind.IsLoopback() {
		// The endpoint reconciler refuses a loopback address for default/kubernetes; nothing in this
		// cluster reaches the API server through that Service.
		args = append(args, "--endpoint-reconciler-type=none")
	} else {
		args = append(args,
			"--kubelet-client-certificate="+c.pkiPath(kubeletClientName+".crt"),
			"--kubelet-client-key="+c.pkiPath(kubeletClientName+".key"),
			"--kubelet-certificate-authority="+c.pkiPath(caName+".crt"),
			"--kubelet-preferred-address-types=InternalIP,Hostname",
			// No kube-proxy runs beside kube-apiserver: webhooks and aggregated APIs are reached
			// at their endpoints (pod IPs), not through Service IPs.
			"--enable-aggregator-routing=true",
		)
	}
	return append(args,
		"--secure-port="+strconv.Itoa(c.ports.apiServer),
		"--tls-cert-file="+c.pkiPath(apiServerName+".crt"),
		"--tls-private-key-file="+c.pkiPath(apiServerName+".key"),
		"--client-ca-file="+c.pkiPath(caName+".crt"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--service-account-issuer="+serviceAccountIssuer,
		"--service-account-key-file="+c.pkiPath(serviceAccountPub),
		"--service-account-signing-key-file="+c.pkiPath(serviceAccountKey),
		// The aggregation layer: kube-apiserver proxies to extension API servers with the front-proxy
		// client certificate and passes the user in these headers.
		"--requestheader-client-ca-file="+c.pkiPath(frontProxyCAName+".crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+c.pkiPath(frontProxyClientName+".crt"),
		"--proxy-client-key-file="+c.pkiPath(frontProxyClientName+".key"),
		"--v=1",
	)
}

func (c *Cluster) schedulerArgs() []string {
	kubeconfig := c.kubeconfigPath("kube-scheduler")
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.ports.scheduler),
		"--tls-cert-file=" + c.pkiPath(schedulerServingName+".crt"),
		"--tls-private-key-file=" + c.pkiPath(schedulerServingName+".key"),
		// One instance: without leader election a restart does not wait for the old lease to expire.
		"--leader-elect=false",
		"--v=1",
	}
}

func (c *Cluster) controllerManagerArgs() []string {
	kubeconfig := c.kubeconfigPath("kube-controller-manager")
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.ports.controllerManager),
		"--tls-cert-file=" + c.pkiPath(controllerServingName+".crt"),
		"--tls-private-key-file=" + c.pkiPath(controllerServingName+".key"),
		"--leader-elect=false",
		"--controllers=*",
		// Each controller gets its own service account, as in kubeadm clusters, so RBAC is exercised.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pkiPath(serviceAccountKey),
		"--root-ca-file=" + c.pkiPath(caName+".crt"),
		"--cluster-signing-cert-file=" + c.pkiPath(caName+".crt"),
		"--cluster-signing-key-file=" + c.pkiPath(caName+".key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--v=1",
	}
}

func (c *Cluster) kubeconfigPath(name string) string { return filepath.Join(c.dir, name+".kubeconfig") }

// writeKubeconfigs writes the admin, scheduler and controller-manager kubeconfigs with the
// certificates embedded, so each file is usable on its own.
func (c *Cluster) writeKubeconfigs() error {
	server := "https://" + net.JoinHostPort(c.bind.String(), strconv.Itoa(c.ports.apiServer))
	for _, k := range []struct{ name, pair, user string }{
		{"admin", adminName, "qvirt-admin"},
		{"kube-scheduler", schedulerClientName, "system:kube-scheduler"},
		{"kube-controller-manager", controllerClientName, "system:kube-controller-manager"},
	} {
		pair, err := c.pki.read(k.pair)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(c.kubeconfigPath(k.name), server, c.pki.ca.CertPEM(), k.user, pair); err != nil {
			return err
		}
		if k.name == "admin" {
			c.adminKubeconfig = c.kubeconfigPath(k.name)
			c.restConfig = restConfig(server, c.pki.ca.CertPEM(), pair)
		}
	}
	return nil
}

func writeKubeconfig(path, server string, caPEM []byte, user string, pair pki.KeyPair) error {
	const name = "qvirt-local"
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {ClientCertificateData: pair.CertPEM, ClientKeyData: pair.KeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: user}},
		CurrentContext: name,
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}

func restConfig(server string, caPEM []byte, pair pki.KeyPair) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: pair.CertPEM,
			KeyData:  pair.KeyPEM,
		},
	}
}

// Kubeconfig is the path of the admin kubeconfig (group system:masters).
func (c *Cluster) Kubeconfig() string { return c.adminKubeconfig }

// RESTConfig returns a new admin client config (group system:masters).
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Dir is the absolute state directory.
func (c *Cluster) Dir() string { return c.dir }

// ClusterCA is the path of the cluster CA certificate: it signs the API server's serving certificate
// and every client certificate the API server accepts (--client-ca-file).
func (c *Cluster) ClusterCA() string { return c.pkiPath(caName + ".crt") }

// FrontProxyCA is the path of the CA of the aggregation layer's front-proxy client certificate: an
// aggregated API server uses it as its --requestheader-client-ca-file.
func (c *Cluster) FrontProxyCA() string { return c.pkiPath(frontProxyCAName + ".crt") }

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// UserConfig issues a client certificate for user in groups, signed by the cluster CA, and returns a
// client config and a kubeconfig file for it. The user has only the rights RBAC grants it.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, string, error) {
	if user == "" {
		return nil, "", errors.New("controlplane: empty user name")
	}
	pair, err := c.pki.issueClient(user, groups)
	if err != nil {
		return nil, "", fmt.Errorf("controlplane: certificate for %s: %w", user, err)
	}
	path := filepath.Join(c.dir, "users", unsafeFileChars.ReplaceAllString(user, "_")+".kubeconfig")
	server := c.restConfig.Host
	if err := writeKubeconfig(path, server, c.pki.ca.CertPEM(), user, pair); err != nil {
		return nil, "", fmt.Errorf("controlplane: %w", err)
	}
	return restConfig(server, c.pki.ca.CertPEM(), pair), path, nil
}

// Kubectl returns a kubectl command that talks to the cluster as admin; the caller runs it. A
// --kubeconfig in args overrides the admin one.
func (c *Cluster) Kubectl(args ...string) *exec.Cmd {
	base := []string{
		"--kubeconfig=" + c.adminKubeconfig,
		// Discovery cache inside Dir, not in $HOME.
		"--cache-dir=" + filepath.Join(c.dir, "kubectl-cache"),
	}
	return exec.Command(filepath.Join(c.binDir, "kubectl"), append(base, args...)...)
}

// Stop ends every process (SIGTERM, SIGKILL after a grace period), in reverse start order, and waits
// for them. Dir stays. Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		began := time.Now()
		var errs []error
		for i := len(c.procs) - 1; i >= 0; i-- {
			p := c.procs[i]
			if err := p.Stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		if c.spawner != nil {
			c.spawner.Stop()
		}
		c.stopErr = errors.Join(errs...)
		c.log.Info("control plane stopped", "elapsed", time.Since(began).Round(time.Millisecond), "err", c.stopErr)
	})
	return c.stopErr
}
