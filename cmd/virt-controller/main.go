// virt-controller runs the VM, VMI and migration controllers.
package main

import (
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/qvirt/qvirt/control/controller"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
	"github.com/qvirt/qvirt/internal/tlsfiles"
)

func main() {
	o := controller.Options{Pods: launcherpod.DefaultOptions()}
	klog.InitFlags(nil)
	// --kubeconfig is registered by controller-runtime (then $KUBECONFIG, then in-cluster).
	flag.StringVar(&o.Namespace, "namespace", "kubevirt", "install namespace, where the leader election lease lives")
	leaderElect := flag.Bool("leader-elect", true, "elect a leader among replicas (lease "+controller.LeaseName+")")
	flag.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", `address of /metrics; "0" turns it off`)
	metricsSecure := flag.Bool("metrics-secure", true, "serve /metrics over HTTPS (false: plain HTTP)")
	flag.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", `directory with tls.crt and tls.key for /metrics (reloaded when they change); "" makes a self-signed certificate at start`)
	flag.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz; "0" turns it off`)
	flag.StringVar(&o.Pods.Image, "launcher-image", launcherpod.DefaultImage, "image of the launcher pods' compute container")
	quantity(&o.Pods.LauncherOverhead, "launcher-memory-overhead", "memory of virt-launcher added to each launcher pod's request")
	quantity(&o.Pods.QEMUOverhead, "qemu-memory-overhead", "memory of QEMU beyond guest RAM added to each launcher pod's request")
	flag.Int64Var(&o.Pods.GuestOverheadPercent, "guest-memory-overhead-percent", launcherpod.DefaultGuestOverheadPercent, "share of guest memory added to each launcher pod's request")
	flag.IntVar(&o.Migrations.PerCluster, "parallel-migrations-per-cluster", 5, "migrations running at once in the cluster")
	flag.IntVar(&o.Migrations.OutboundPerNode, "parallel-outbound-migrations-per-node", 2, "migrations leaving one node at once")
	nodeCACert := flag.String("node-ca-cert-file", "/etc/virt-controller/node-ca/tls.crt", `CA that signs node agents' serving certificates (reloaded when it changes); "" leaves them to another signer`)
	nodeCAKey := flag.String("node-ca-key-file", "/etc/virt-controller/node-ca/tls.key", "key of that CA")
	flag.DurationVar(&o.NodeCertLifetime, "node-cert-lifetime", 24*time.Hour, "longest lifetime of a node agent's serving certificate")
	flag.Parse()
	o.DisableLeaderElection = !*leaderElect
	o.MetricsInsecure = !*metricsSecure

	log := klog.Background().WithName("virt-controller")
	ctrl.SetLogger(log)
	o.Logger = log

	if *nodeCACert != "" {
		ca, err := tlsfiles.NewKeyPair(*nodeCACert, *nodeCAKey)
		if err != nil {
			log.Error(err, "Loading the node CA")
			os.Exit(2)
		}
		o.NodeCA = ca.Certificate
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Loading the kubeconfig")
		os.Exit(2)
	}
	mgr, err := controller.NewManager(cfg, o)
	if err != nil {
		log.Error(err, "Setting up the manager")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "virt-controller failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// quantity registers a resource.Quantity flag whose default is q's value.
func quantity(q *resource.Quantity, name, usage string) {
	flag.Func(name, usage+" (default "+q.String()+")", func(s string) error {
		v, err := resource.ParseQuantity(s)
		if err != nil {
			return err
		}
		*q = v
		return nil
	})
}
