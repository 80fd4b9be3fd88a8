package operator

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/operator/install"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestOperatorInstallsFromTheCRAndPutsBackWhatIsDeleted runs the operator against a real
// kube-apiserver (with a controller manager, and no nodes: nothing becomes ready): applying
// deploy/operator.yaml's CRDs and deploy/kubevirt-cr.yaml makes it create the installation at
// its image's tag, report Deploying, and recreate a deleted Service.
func TestOperatorInstallsFromTheCRAndPutsBackWhatIsDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	cp := controlplane.ForTest(t, controlplane.Options{Log: testr.New(t)})
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := cp.Kubectl(args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
	}
	kubectl("apply", "--server-side", "-f", "../../deploy/operator.yaml")
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", "../../deploy/crds")

	cfg := cp.RESTConfig()
	mgr, err := NewManager(cfg, Options{Namespace: "kubevirt", Image: "registry.example/qv/virt-operator:v9", Propagation: 2 * time.Second,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", WebhookPort: freePort(t), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	kubectl("apply", "-f", "../../deploy/kubevirt-cr.yaml")

	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	var kvr v1.KubeVirt
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: "kubevirt", Name: "kubevirt"}, &kvr); err != nil {
			return false, err
		}
		created := kvCondition(&kvr, v1.KubeVirtConditionCreated)
		return created != nil && created.Status == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("not created: %v; status %+v", err, kvr.Status)
	}
	st := kvr.Status
	if st.Phase != v1.KubeVirtPhaseDeploying || st.TargetKubeVirtVersion != "v9" || st.ObservedKubeVirtVersion != "" {
		t.Errorf("status %+v, want Deploying v9, nothing observed yet", st)
	}
	if a := kvCondition(&kvr, v1.KubeVirtConditionAvailable); a == nil || a.Status != corev1.ConditionFalse || a.Reason != reasonDeploying {
		t.Errorf("Available %+v, want False with %s", a, reasonDeploying)
	}
	if len(kvr.Finalizers) != 1 || kvr.Finalizers[0] != Finalizer {
		t.Errorf("finalizers %v", kvr.Finalizers)
	}
	d, err := kube.AppsV1().Deployments("kubevirt").Get(ctx, "virt-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.example/qv/virt-api:v9" {
		t.Errorf("virt-api image %s", img)
	}
	// A second CR is refused, naming the installation.
	second := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "another"}}
	if err := cl.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(second), second); err != nil {
			return false, err
		}
		c := kvCondition(second, v1.KubeVirtConditionDegraded)
		return c != nil && c.Reason == "ExistingDeployment", nil
	})
	if err != nil {
		t.Errorf("second KubeVirt CR: %v; status %+v", err, second.Status)
	}

	old, err := kube.CoreV1().Services("kubevirt").Get(ctx, "virt-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Services("kubevirt").Delete(ctx, "virt-api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Services("kubevirt").Get(ctx, "virt-api", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && s.UID != old.UID, err
	})
	if err != nil {
		t.Fatalf("service virt-api not put back: %v", err)
	}
	checkPrunesWhatAnOlderVersionInstalled(ctx, t, kube)
}

// checkPrunesWhatAnOlderVersionInstalled: an object an older version rendered (version label)
// that this one does not is removed; the operator's own state (managed-by only) and what it
// does not manage stay.
func checkPrunesWhatAnOlderVersionInstalled(ctx context.Context, t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	one := intstr.FromInt32(1)
	stale := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-api-renamed", Namespace: "kubevirt",
			Labels: map[string]string{install.ManagedByLabel: install.ManagedByValue, install.VersionLabel: "v8"}},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{v1.AppLabel: "virt-api"}}},
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("kubevirt").Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keep := map[string]map[string]string{
		"operator-state": {install.ManagedByLabel: install.ManagedByValue},
		"someone-elses":  {install.VersionLabel: "v8"},
	}
	for name, l := range keep {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kubevirt", Labels: l}}
		if _, err := kube.CoreV1().ConfigMaps("kubevirt").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kube.PolicyV1().PodDisruptionBudgets("kubevirt").Get(ctx, stale.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Errorf("PodDisruptionBudget %s of version v8 not removed: %v", stale.Name, err)
	}
	for name := range keep {
		if _, err := kube.CoreV1().ConfigMaps("kubevirt").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap %s: %v", name, err)
		}
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("kubevirt").Get(ctx, "virt-api-pdb", metav1.GetOptions{}); err != nil {
		t.Errorf("the current version's PodDisruptionBudget virt-api-pdb: %v", err)
	}
}

func kvCondition(kv *v1.KubeVirt, t v1.KubeVirtConditionType) *v1.KubeVirtCondition {
	for i := range kv.Status.Conditions {
		if kv.Status.Conditions[i].Type == t {
			return &kv.Status.Conditions[i]
		}
	}
	return nil
}
