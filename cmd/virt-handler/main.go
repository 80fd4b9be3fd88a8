// virt-handler is qvirt's node agent: one per node (a DaemonSet), it runs the VMs whose launcher
// pods the kubelet started on this node.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/qvirt/qvirt/node/agent"
	"github.com/qvirt/qvirt/node/deviceplugin"
	"github.com/qvirt/qvirt/node/handler"
	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/podnet"
)

func main() {
	var o agent.Options
	klog.InitFlags(nil)
	flag.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name")
	flag.StringVar(&o.Namespace, "namespace", "kubevirt", "namespace of the KubeVirt CR")
	flag.StringVar(&o.KubeletPodsDir, "kubelet-pods-dir", handler.DefaultKubeletPodsDir, "the kubelet's pod directory, where each launcher pod's VM directory (an emptyDir) is")
	flag.IntVar(&o.LauncherUID, "launcher-uid", 107, "uid virt-launcher runs as, which must own the sockets in a VM's directory")
	flag.StringVar(&o.APIListen, "listen", ":8186", "address of the node API (mutual TLS, for virt-api)")
	flag.StringVar(&o.AdvertiseHost, "advertise-host", os.Getenv("POD_IP"), "host virt-api uses to reach the node API")
	flag.StringVar(&o.TLSCertFile, "tls-cert-file", "/etc/virt-handler/certificates/tls.crt", "node API serving certificate (reloaded when it changes)")
	flag.StringVar(&o.TLSKeyFile, "tls-key-file", "/etc/virt-handler/certificates/tls.key", "node API serving key")
	flag.StringVar(&o.ClientCAFile, "client-ca-file", "/etc/virt-handler/clientca/ca.crt", "CA of virt-api's client certificate")
	flag.StringVar(&o.NodeCAFile, "node-ca-file", "/etc/virt-handler/certificates/node-ca.crt", "CA of node certificates, trusted for migrations between nodes; empty: this node takes no part in migrations")
	flag.StringVar(&o.MetricsListen, "metrics-listen", ":8443", "address of /metrics; empty disables it")
	flag.DurationVar(&o.StatsInterval, "stats-interval", 10*time.Second, "how often VM statistics are refreshed for scrapes")
	o.APILimits = nodeapi.DefaultLimits()
	o.APILimits.RegisterFlags(flag.CommandLine)
	flag.DurationVar(&o.LauncherCallTimeout, "launcher-call-timeout", handler.DefaultLauncherCallTimeout, "how long a command or screenshot waits for a VM's launcher")
	flag.IntVar(&o.MaxPortForwardsPerVMI, "max-port-forwards-per-vmi", handler.DefaultMaxPortForwardsPerVMI, "port-forward streams open to one VMI at once; more are answered 429; 0: no cap")
	dp := deviceplugin.Options{}
	flag.StringVar(&dp.Dir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory (holding kubelet.sock); empty offers no devices")
	flag.IntVar(&dp.Count, "max-devices", deviceplugin.DefaultCount, "units offered of each device (VMs per node that can use it)")
	flag.StringVar(&dp.HostRoot, "host-root", deviceplugin.DefaultHostRoot, "the host's filesystem as this process sees it, where devices are looked for")
	flag.Parse()
	if dp.Dir != "" {
		o.DevicePlugins = &dp
	}

	log := klog.Background().WithName("virt-handler").WithValues("node", o.NodeName)
	fail := func(err error, msg string) {
		log.Error(err, msg)
		klog.Flush()
		os.Exit(1)
	}
	if o.NodeName == "" {
		fail(nil, "--node-name (or NODE_NAME) is required")
	}
	// --kubeconfig is controller-runtime's flag; in-cluster configuration when it is empty.
	rc, err := config.GetConfig()
	if err != nil {
		fail(err, "kubeconfig")
	}
	o.REST, o.Log = rc, log
	o.Network = &podnet.Plumber{Log: log.WithName("podnet")}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a, err := agent.Start(ctx, o)
	if err != nil {
		fail(err, "node agent")
	}
	if err := <-a.Done(); err != nil {
		fail(err, "node agent stopped")
	}
	klog.Flush()
}
