// virt-api serves qvirt's admission webhooks and the subresources.kubevirt.io aggregated API.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/qvirt/qvirt/control/api"
	"github.com/qvirt/qvirt/control/virtapi"
	"github.com/qvirt/qvirt/control/webhooks"
)

func main() {
	var o virtapi.Options
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	flag.StringVar(&o.Namespace, "namespace", "kubevirt", "namespace of the KubeVirt CR")
	flag.StringVar(&o.Listen, "listen", ":8443", "address of the HTTPS listener")
	flag.BoolVar(&o.ReusePort, "reuse-port", false, "share the listen address with other replicas (SO_REUSEPORT)")
	flag.StringVar(&o.TLSCertFile, "tls-cert-file", "/etc/virt-api/certificates/tls.crt", "serving certificate (reloaded when it changes)")
	flag.StringVar(&o.TLSKeyFile, "tls-key-file", "/etc/virt-api/certificates/tls.key", "serving key")
	flag.StringVar(&o.RequestHeaderCAFile, "requestheader-client-ca-file", "/etc/virt-api/requestheader/ca.crt", "CA of the aggregation layer's proxy client certificate")
	allowed := flag.String("requestheader-allowed-names", "front-proxy-client", "comma-separated proxy certificate names accepted; empty accepts any")
	flag.StringVar(&o.NodeCAFile, "node-ca-file", "/etc/virt-api/node/ca.crt", "CA of the node agents' serving certificates")
	flag.StringVar(&o.NodeClientCertFile, "node-client-cert-file", "/etc/virt-api/node/tls.crt", "client certificate presented to node agents")
	flag.StringVar(&o.NodeClientKeyFile, "node-client-key-file", "/etc/virt-api/node/tls.key", "client key for node agents")
	privUsers := flag.String("privileged-users", "", "comma-separated users allowed to edit VMI status (default: the components' service accounts)")
	o.Limits = virtapi.DefaultLimits()
	o.Limits.RegisterFlags(flag.CommandLine)
	flag.Int64Var(&o.MaxWebhookBodyBytes, "max-webhook-body-bytes", webhooks.DefaultMaxReviewBytes, "largest admission review accepted; larger ones are answered 413")
	flag.Int64Var(&o.MaxRequestBodyBytes, "max-request-body-bytes", api.DefaultMaxBodyBytes, "largest subresource request body accepted; larger ones are answered 413")
	flag.Parse()

	if *allowed != "" {
		o.RequestHeaderAllowedNames = strings.Split(*allowed, ",")
	}
	if *privUsers != "" {
		o.PrivilegedUsers = strings.Split(*privUsers, ",")
	}
	o.Log = klog.Background().WithName("virt-api")
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "kubeconfig")
		os.Exit(2)
	}
	o.REST = rc
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := virtapi.Run(ctx, o); err != nil {
		klog.ErrorS(err, "virt-api failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
