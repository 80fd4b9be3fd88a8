// Package podrunner is local mode's stand-in for a kubelet and a container runtime, for launcher
// pods on machines where neither exists. It registers a Node and keeps it alive (Lease and
// NodeStatus heartbeats), and for each launcher pod bound to that node checks the VM images in
// the local image store, creates a network namespace attached through CNI to the node's bridge,
// starts virt-launcher in it as a plain process, and keeps the pod's status true until the pod
// is deleted. Launchers outlive the runner; a runner started later adopts them.
//
// Each node's pod network (its bridge and the host ends of the pods' veths) lives in a network
// namespace of its own, /run/netns/qvnode-NODE: nothing is added to the host's namespace.
package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/qvirt/qvirt/node/images"
)

// DefaultCNIPluginDir is where Debian's containernetworking-plugins puts the plugins.
const DefaultCNIPluginDir = "/usr/lib/cni"

// Options configure a Runner.
type Options struct {
	// NodeName is the Node to register and whose pods to run. Required.
	NodeName string
	// NodeIP is the node's InternalIP and the pods' hostIP. Empty means 127.0.0.1.
	NodeIP string
	// Client talks to the API server. A node identity (system:node:NAME in system:nodes)
	// suffices, as for a kubelet.
	Client kubernetes.Interface
	// LauncherBinary replaces /usr/bin/virt-launcher of the compute container. Required.
	LauncherBinary string
	// Images holds the VM images pods name; nil means an empty store.
	Images *images.Store
	CNI    CNIOptions
	// StateDir keeps per-pod state (pids, CNI cache and address allocations) across restarts.
	// Required; one per node.
	StateDir string
	// Log receives progress and errors; the zero value discards them.
	Log logr.Logger

	// LeaseDuration is the node lease's duration; it is renewed every quarter of it. Zero means
	// 40 s, as for a kubelet.
	LeaseDuration time.Duration
	// StatusInterval is how often NodeStatus is posted. Zero means 1 min.
	StatusInterval time.Duration
	// PodRetry is the first delay before retrying a pod that could not start (an image missing,
	// a failed setup); it doubles up to a minute. Zero means 2 s.
	PodRetry time.Duration
}

// CNIOptions configure the pod network of one node.
type CNIOptions struct {
	// PluginDir holds the bridge, host-local and loopback plugins. Empty means
	// DefaultCNIPluginDir.
	PluginDir string
	// Bridge is the node's bridge. Empty means "qv-" + NodeName (cut to 15 characters).
	Bridge string
	// Subnet is the node's pod subnet, e.g. 10.244.1.0/24, handed out by host-local. Required.
	Subnet string
	// NetworkName names the CNI network. Empty means "qvirt-" + NodeName.
	NetworkName string
}

// Runner runs the launcher pods of one node.
type Runner struct {
	opts      Options
	log       logr.Logger
	nodeNetns string
	net       *network
	recorder  record.EventRecorder

	mu      sync.Mutex
	workers map[types.UID]*worker
	synced  bool
	wg      sync.WaitGroup
	podsCtx context.Context
	store   cache.Store
}

// New checks opts and returns a Runner; Run starts it.
func New(opts Options) (*Runner, error) {
	if opts.NodeName == "" || opts.Client == nil || opts.LauncherBinary == "" || opts.StateDir == "" {
		return nil, errors.New("podrunner: NodeName, Client, LauncherBinary and StateDir are required")
	}
	if opts.NodeIP == "" {
		opts.NodeIP = "127.0.0.1"
	}
	if net.ParseIP(opts.NodeIP) == nil {
		return nil, fmt.Errorf("podrunner: NodeIP %q is not an IP address", opts.NodeIP)
	}
	if _, _, err := net.ParseCIDR(opts.CNI.Subnet); err != nil {
		return nil, fmt.Errorf("podrunner: CNI.Subnet: %w", err)
	}
	if opts.CNI.PluginDir == "" {
		opts.CNI.PluginDir = DefaultCNIPluginDir
	}
	if opts.CNI.Bridge == "" {
		opts.CNI.Bridge = "qv-" + opts.NodeName
		if len(opts.CNI.Bridge) > 15 {
			opts.CNI.Bridge = opts.CNI.Bridge[:15]
		}
	}
	if opts.CNI.NetworkName == "" {
		opts.CNI.NetworkName = "qvirt-" + opts.NodeName
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 40 * time.Second
	}
	if opts.StatusInterval == 0 {
		opts.StatusInterval = time.Minute
	}
	if opts.PodRetry == 0 {
		opts.PodRetry = 2 * time.Second
	}
	if _, err := os.Stat(opts.LauncherBinary); err != nil {
		return nil, fmt.Errorf("podrunner: launcher binary: %w", err)
	}
	stateDir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, err
	}
	opts.StateDir = stateDir
	return &Runner{
		opts:      opts,
		log:       opts.Log.WithValues("node", opts.NodeName),
		nodeNetns: NodeNetns(opts.NodeName),
		workers:   map[types.UID]*worker{},
	}, nil
}

// NodeNetns is the name of the network namespace holding the pod network of node.
func NodeNetns(node string) string { return "qvnode-" + node }

// RemoveNodeNetwork deletes node's network namespace (its bridge goes with it). Call it once no
// pod of the node runs any more, e.g. when local mode is torn down.
func RemoveNodeNetwork(node string) error { return deleteNetns(NodeNetns(node)) }

// Run registers the node, adopts the launchers a previous runner started, and runs the node's
// pods until ctx ends. Launchers keep running after Run returns.
func (r *Runner) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(r.opts.StateDir, "pods"), 0o700); err != nil {
		return err
	}
	if !netnsExists(r.nodeNetns) {
		if _, err := createNetns(r.nodeNetns); err != nil && !netnsExists(r.nodeNetns) {
			return fmt.Errorf("podrunner: node network: %w", err)
		}
	}
	var err error
	if r.net, err = newNetwork(r.opts.CNI, netnsPath(r.nodeNetns), r.opts.StateDir); err != nil {
		return fmt.Errorf("podrunner: %w", err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.opts.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	r.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "qvirt-podrunner", Host: r.opts.NodeName})

	// Adopted sandboxes are known before the first pod event, so no event can start a second
	// launcher for a pod that already has one.
	adopted, err := r.loadSandboxes()
	if err != nil {
		return fmt.Errorf("podrunner: %w", err)
	}
	r.podsCtx = ctx
	r.mu.Lock()
	for _, sb := range adopted {
		r.workers[sb.PodUID] = r.newWorker(sb, nil)
	}
	r.mu.Unlock()

	if err := r.registerNode(ctx); err != nil {
		return err
	}
	hb := &sync.WaitGroup{}
	hb.Go(func() { r.heartbeat(ctx) })
	defer hb.Wait()

	factory := informers.NewSharedInformerFactoryWithOptions(r.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + r.opts.NodeName }))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.dispatch(obj) },
		UpdateFunc: func(_, obj any) { r.dispatch(obj) },
		DeleteFunc: func(obj any) { r.podGone(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return nil // stopped before the first list
	}
	r.store = podInformer.GetStore()
	r.startWorkers()
	r.log.Info("pod runner started", "adopted", len(adopted), "subnet", r.opts.CNI.Subnet, "nodeNetns", r.nodeNetns)

	<-ctx.Done()
	r.wg.Wait()
	r.log.Info("pod runner stopped; launchers keep running")
	return nil
}

// startWorkers starts the workers known before the informer synced; an adopted pod the API no
// longer has is torn down.
func (r *Runner) startWorkers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = true
	for uid, w := range r.workers {
		if !w.hasPod() {
			obj, ok, _ := r.store.GetByKey(w.sb.Namespace + "/" + w.sb.Name)
			if pod, isPod := obj.(*corev1.Pod); ok && isPod && pod.UID == uid {
				w.update(pod)
			} else {
				w.markGone()
			}
		}
		r.start(w)
	}
}

// start runs w; r.mu is held.
func (r *Runner) start(w *worker) {
	r.wg.Go(func() {
		w.run(r.podsCtx)
		r.mu.Lock()
		if r.workers[w.uid] == w {
			delete(r.workers, w.uid)
		}
		r.mu.Unlock()
	})
}

func (r *Runner) dispatch(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[pod.UID]; w != nil {
		w.update(pod)
		return
	}
	w := r.newWorker(nil, pod)
	r.workers[pod.UID] = w
	if r.synced {
		r.start(w)
	}
}

func (r *Runner) podGone(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[pod.UID]; w != nil {
		w.update(pod)
		w.markGone()
	}
}
