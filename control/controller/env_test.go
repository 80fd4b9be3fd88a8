package controller_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// env is a real control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager) with the kubevirt.io CRDs, hand-made nodes kept
// alive by lease renewals, a stand-in for kubelet that runs launcher pods and a
// stand-in for the node agent that reports scheduled VMIs running.
type env struct {
	t       *testing.T
	cfg     *rest.Config
	c       client.Client
	dir     string
	log     logr.Logger
	logFile *os.File
}

var setLoggerOnce sync.Once

func startEnv(t *testing.T, nodes ...string) *env {
	t.Helper()
	controlplane.RequireBinaries(t)
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	dir := t.TempDir()
	logPath := filepath.Join(dir, "virt-controller.log")
	if p := os.Getenv("QVIRT_CONTROLLER_TEST_LOG"); p != "" {
		logPath = p // kept after the test, for reading
	}
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, logFile: f}
	var mu sync.Mutex
	e.log = funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})
	// controller-runtime's own packages log through the global logger.
	setLoggerOnce.Do(func() { ctrl.SetLogger(e.log) })
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(f.Name())
			lines := strings.Split(string(b), "\n")
			t.Logf("last lines of the controller log:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})

	began := time.Now()
	cl, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	t.Logf("control plane up in %s", time.Since(began).Round(time.Millisecond))

	e.cfg = cl.RESTConfig()
	e.cfg.QPS, e.cfg.Burst = 200, 400
	scheme, err := controller.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if e.c, err = client.New(e.cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	e.installCRDs(ctx)
	e.namespace(ctx, "kubevirt")
	for _, n := range nodes {
		e.node(ctx, n)
	}
	go e.runPods(ctx)
	go e.runAgent(ctx)
	return e
}

func (e *env) installCRDs(ctx context.Context) {
	e.t.Helper()
	files, err := filepath.Glob("../../deploy/crds/*.yaml")
	if err != nil || len(files) == 0 {
		e.t.Fatalf("CRDs not found: %v", err)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			e.t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			e.t.Fatalf("%s: %v", f, err)
		}
		if err := e.c.Create(ctx, crd); err != nil {
			e.t.Fatalf("%s: %v", f, err)
		}
		names = append(names, crd.Name)
	}
	e.eventually(time.Minute, func() (bool, string) {
		for _, n := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := e.c.Get(ctx, client.ObjectKey{Name: n}, crd); err != nil {
				return false, err.Error()
			}
			established := false
			for _, c := range crd.Status.Conditions {
				established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, n + " not established"
			}
		}
		return true, ""
	})
}

func (e *env) namespace(ctx context.Context, name string) {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	// The API server refuses pods until the namespace's default service account exists.
	e.eventually(time.Minute, func() (bool, string) {
		err := e.c.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, fmt.Sprint(err)
	})
}

// node registers a schedulable Node and keeps its lease fresh so that the node
// lifecycle controller never taints it unreachable.
func (e *env) node(ctx context.Context, name string) {
	e.t.Helper()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("500"),
		// Launcher pods request their disks' ephemeral storage.
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		// What a node agent's device plugins offer on a node with KVM.
		launcherpod.KVMDevice:      resource.MustParse("1000"),
		launcherpod.TunDevice:      resource.MustParse("1000"),
		launcherpod.VhostNetDevice: resource.MustParse("1000"),
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		launcherpod.SchedulableNodeLabel: "true",
		corev1.LabelHostname:             name,
		corev1.LabelOSStable:             "linux",
	}}}
	if err := e.c.Create(ctx, n); err != nil {
		e.t.Fatal(err)
	}
	now := metav1.Now()
	n.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if err := e.c.Status().Update(ctx, n); err != nil {
		e.t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()},
		},
	}
	if err := e.c.Create(ctx, lease); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l := &coordinationv1.Lease{}
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(lease), l); err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_ = e.c.Update(ctx, l)
		}
	}()
}

// runPods plays kubelet for launcher pods: a bound pod becomes Running and
// Ready, a pod being deleted is removed at once.
func (e *env) runPods(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.MatchingLabels{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue}); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				switch {
				case p.DeletionTimestamp != nil:
					_ = e.c.Delete(ctx, p, client.GracePeriodSeconds(0))
				case p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending:
					now := metav1.Now()
					p.Status.Phase = corev1.PodRunning
					p.Status.StartTime = &now
					p.Status.PodIP = "10.244.0.10"
					for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
						p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
					}
					_ = e.c.Status().Update(ctx, p)
				}
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// runAgent plays the node agent: a Scheduled VMI is reported Running and Ready.
func (e *env) runAgent(ctx context.Context) {
	for ctx.Err() == nil {
		var vmis virtv1.VirtualMachineInstanceList
		if err := e.c.List(ctx, &vmis); err == nil {
			for i := range vmis.Items {
				v := &vmis.Items[i]
				if v.Status.Phase != virtv1.Scheduled || v.DeletionTimestamp != nil {
					continue
				}
				now := metav1.Now()
				v.Status.Phase = virtv1.Running
				v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
					virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: virtv1.Running, PhaseTransitionTimestamp: now})
				v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
					Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastTransitionTime: now,
				})
				_ = e.c.Status().Update(ctx, v)
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// manager is a running virt-controller.
type manager struct {
	mgr         ctrl.Manager
	stopOnce    sync.Once
	cancel      context.CancelFunc
	done        chan error
	metricsAddr string
	healthAddr  string
}

func (e *env) startManager() *manager {
	e.t.Helper()
	m := &manager{done: make(chan error, 1), metricsAddr: freeAddr(e.t), healthAddr: freeAddr(e.t)}
	mgr, err := controller.NewManager(e.cfg, controller.Options{
		Namespace:              "kubevirt",
		MetricsBindAddress:     m.metricsAddr,
		HealthProbeBindAddress: m.healthAddr,
		Pods:                   launcherpod.DefaultOptions(),
		Logger:                 e.log,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.mgr, m.cancel = mgr, cancel
	go func() { m.done <- mgr.Start(ctx) }()
	e.t.Cleanup(func() { m.stop(e.t) })
	return m
}

// stop cancels the manager and waits for it to return; a second call is a no-op.
func (m *manager) stop(t *testing.T) {
	t.Helper()
	m.stopOnce.Do(func() {
		m.cancel()
		select {
		case err := <-m.done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("manager did not stop")
		}
	})
}

// get fetches url; the metrics server's certificate is self-signed, so it is not verified.
func (m *manager) get(url string) (int, string, error) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually polls cond until it holds, failing the test with cond's last
// explanation after timeout.
func (e *env) eventually(timeout time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// The helpers below read objects without failing on absence.

func (e *env) getVM(ns, name string) *virtv1.VirtualMachine {
	vm := &virtv1.VirtualMachine{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
		return nil
	}
	return vm
}

func (e *env) getVMI(ns, name string) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vmi); err != nil {
		return nil
	}
	return vmi
}

func (e *env) pods(ns string) []corev1.Pod {
	e.t.Helper()
	var l corev1.PodList
	if err := e.c.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue}); err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatal(err)
	}
}

// patchVM applies mutate to the VM, retrying on conflicts.
func (e *env) patchVM(ns, name string, mutate func(*virtv1.VirtualMachine)) {
	e.t.Helper()
	e.retry(func() error {
		vm := &virtv1.VirtualMachine{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
			return err
		}
		mutate(vm)
		return e.c.Update(context.Background(), vm)
	})
}

// patchVMStatus changes status fields the way virt-api and the node agent do.
func (e *env) patchVMStatus(ns, name string, mutate func(*virtv1.VirtualMachine)) {
	e.t.Helper()
	e.retry(func() error {
		vm := &virtv1.VirtualMachine{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
			return err
		}
		mutate(vm)
		return e.c.Status().Update(context.Background(), vm)
	})
}

func (e *env) patchVMIStatus(ns, name string, mutate func(*virtv1.VirtualMachineInstance)) {
	e.t.Helper()
	e.retry(func() error {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vmi); err != nil {
			return err
		}
		mutate(vmi)
		return e.c.Status().Update(context.Background(), vmi)
	})
}

func (e *env) retry(f func() error) {
	e.t.Helper()
	for i := 0; ; i++ {
		err := f()
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i > 20 {
			e.t.Fatal(err)
		}
	}
}
