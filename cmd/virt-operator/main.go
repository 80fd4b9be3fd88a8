// virt-operator installs qvirt from the KubeVirt CR, keeps it as declared, rotates its
// certificates and uninstalls it when the CR is deleted.
package main

import (
	"flag"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/qvirt/qvirt/control/operator"
)

func main() {
	var o operator.Options
	klog.InitFlags(nil)
	flag.StringVar(&o.Namespace, "namespace", envOr("POD_NAMESPACE", "kubevirt"), "namespace of the KubeVirt CR and of the components")
	flag.StringVar(&o.Image, "image", os.Getenv("VIRT_OPERATOR_IMAGE"), "the operator's own image; the components' images come from its registry and tag unless the CR names others")
	flag.DurationVar(&o.Propagation, "propagation", 2*time.Minute, "longest time a Secret's or ConfigMap's change takes to reach the components' files (kubelet sync and reload)")
	flag.BoolVar(&o.LeaderElect, "leader-elect", true, "reconcile only while holding the lease "+operator.LeaseName)
	flag.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", "address of /metrics; 0 turns it off")
	flag.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.IntVar(&o.WebhookPort, "webhook-port", 8444, "port of the operator's admission webhook (HTTPS)")
	flag.Parse()

	log := klog.Background().WithName("virt-operator")
	ctrl.SetLogger(log)
	o.Log = log
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Loading the kubeconfig")
		os.Exit(2)
	}
	mgr, err := operator.NewManager(cfg, o)
	if err != nil {
		log.Error(err, "Setting up the operator")
		os.Exit(2)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "virt-operator failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
