// virt-handler is qvirt's node agent. With --local-pods it also runs the launcher pods bound
// to its node, for machines without a kubelet (local mode).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/qvirt/qvirt/node/agent"
	"github.com/qvirt/qvirt/node/images"
	"github.com/qvirt/qvirt/node/podnet"
	"github.com/qvirt/qvirt/node/podrunner"
)

func main() {
	var o agent.Options
	klog.InitFlags(nil)
	flag.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name")
	flag.StringVar(&o.Namespace, "namespace", "kubevirt", "namespace of the KubeVirt CR")
	flag.StringVar(&o.VMDirRoot, "vm-dir-root", "/var/run/qvirt/vms", "host directory holding one directory per VMI, shared with the launchers")
	flag.StringVar(&o.APIListen, "listen", ":8186", "address of the node API (mutual TLS, for virt-api)")
	flag.StringVar(&o.AdvertiseHost, "advertise-host", os.Getenv("POD_IP"), "host virt-api uses to reach the node API")
	flag.StringVar(&o.TLSCertFile, "tls-cert-file", "/etc/virt-handler/certificates/tls.crt", "node API serving certificate (reloaded when it changes)")
	flag.StringVar(&o.TLSKeyFile, "tls-key-file", "/etc/virt-handler/certificates/tls.key", "node API serving key")
	flag.StringVar(&o.ClientCAFile, "client-ca-file", "/etc/virt-handler/clientca/ca.crt", "CA of virt-api's client certificate")
	flag.StringVar(&o.MetricsListen, "metrics-listen", ":8443", "address of /metrics; empty disables it")
	flag.DurationVar(&o.StatsInterval, "stats-interval", 10*time.Second, "how often VM statistics are refreshed for scrapes")
	imageStore := flag.String("image-store", "", "local OCI image store for the containerDisk and kernelBoot images of launcher pods without image volumes (the local pod runner's)")

	localPods := flag.Bool("local-pods", false, "run launcher pods bound to this node as processes (no kubelet)")
	podsKubeconfig := flag.String("local-pods-kubeconfig", "", "kubeconfig of the node identity (system:node:NAME) the pod runner acts as")
	launcherBin := flag.String("launcher-binary", "/usr/bin/virt-launcher", "virt-launcher run for launcher pods (local pods)")
	podSubnet := flag.String("pod-subnet", "10.244.1.0/24", "this node's pod subnet (local pods)")
	podBridge := flag.String("pod-bridge", "", "this node's pod bridge (local pods; default qv-<node>)")
	stateDir := flag.String("state-dir", "/var/lib/qvirt/podrunner", "pod runner state (local pods)")
	cniDir := flag.String("cni-plugin-dir", podrunner.DefaultCNIPluginDir, "CNI plugins (local pods)")
	nodeIP := flag.String("node-ip", "127.0.0.1", "node InternalIP (local pods)")
	flag.Parse()

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
	var store *images.Store
	if *imageStore != "" {
		if store, err = images.Open(*imageStore); err != nil {
			fail(err, "image store")
		}
		o.Images = store
	}
	if *localPods {
		prc, err := clientcmd.BuildConfigFromFlags("", *podsKubeconfig)
		if err != nil {
			fail(err, "pod runner kubeconfig")
		}
		kube, err := kubernetes.NewForConfig(prc)
		if err != nil {
			fail(err, "pod runner client")
		}
		bridge := *podBridge
		if bridge == "" {
			bridge = "qv-" + o.NodeName
		}
		runner, err := podrunner.New(podrunner.Options{
			NodeName: o.NodeName, NodeIP: *nodeIP, Client: kube, LauncherBinary: *launcherBin, Images: store,
			CNI:      podrunner.CNIOptions{PluginDir: *cniDir, Bridge: bridge, Subnet: *podSubnet},
			StateDir: *stateDir, Log: log.WithName("podrunner"),
		})
		if err != nil {
			fail(err, "pod runner")
		}
		o.Runnables = append(o.Runnables, manager.RunnableFunc(runner.Run))
		o.NodeNetns = "/run/netns/" + podrunner.NodeNetns(o.NodeName)
	}

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
