package e2e

// virt-operator on the local cluster: what it installed and how it reports it, putting back
// what is deleted or changed, and uninstalling (refused while VMs exist, complete without, and
// installed again from the CR).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

const managedBy = "app.kubernetes.io/managed-by=virt-operator"

func kubeVirtCR(t testing.TB, c *localcluster.Cluster) *v1.KubeVirt {
	t.Helper()
	kvr := &v1.KubeVirt{}
	if err := kv(t, c).Get(context.Background(), client.ObjectKey{Namespace: "kubevirt", Name: "kubevirt"}, kvr); err != nil {
		t.Fatal(err)
	}
	return kvr
}

func kvCondition(kvr *v1.KubeVirt, ct v1.KubeVirtConditionType) *v1.KubeVirtCondition {
	for i := range kvr.Status.Conditions {
		if kvr.Status.Conditions[i].Type == ct {
			return &kvr.Status.Conditions[i]
		}
	}
	return nil
}

// waitAvailable waits for the CR to report Available again and returns how long that took.
func waitAvailable(t testing.TB, c *localcluster.Cluster, timeout time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	if out, err := c.K8s.Kubectl("wait", "-n", "kubevirt", "kv/kubevirt", "--for=condition=Available", "--timeout="+timeout.String()).CombinedOutput(); err != nil {
		t.Fatalf("KubeVirt CR not Available: %v: %s\n%s", err, out, kubeVirtCR(t, c).Status.Conditions)
	}
	return time.Since(began)
}

func clients(t testing.TB, c *localcluster.Cluster) (kubernetes.Interface, aggregator.Interface) {
	t.Helper()
	agg, err := aggregator.NewForConfig(c.K8s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c.Kube, agg
}

func TestOperatorInstalledQvirtAndReportsItAsKubeVirtDoes(t *testing.T) {
	c := localStack(t)
	ctx := context.Background()
	kube, agg := clients(t, c)
	kvr := kubeVirtCR(t, c)
	st := kvr.Status
	if st.Phase != v1.KubeVirtPhaseDeployed || st.ObservedKubeVirtVersion != localcluster.ComponentTag ||
		st.TargetKubeVirtVersion != localcluster.ComponentTag || st.OperatorVersion != localcluster.ComponentTag ||
		st.ObservedGeneration == nil || *st.ObservedGeneration != kvr.Generation {
		t.Errorf("status %+v, want Deployed at %s, generation %d observed", st, localcluster.ComponentTag, kvr.Generation)
	}
	for ct, want := range map[v1.KubeVirtConditionType]corev1.ConditionStatus{
		v1.KubeVirtConditionAvailable: corev1.ConditionTrue, v1.KubeVirtConditionCreated: corev1.ConditionTrue,
		v1.KubeVirtConditionProgressing: corev1.ConditionFalse, v1.KubeVirtConditionDegraded: corev1.ConditionFalse,
	} {
		if cond := kvCondition(kvr, ct); cond == nil || cond.Status != want || cond.Reason == "" {
			t.Errorf("condition %s: %+v, want %s with a reason", ct, cond, want)
		}
	}
	// Every component runs the image of the operator's tag, and is labelled as the operator's.
	for _, name := range []string{"virt-api", "virt-controller"} {
		d, err := kube.AppsV1().Deployments("kubevirt").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "qvirt/"+name+":"+localcluster.ComponentTag || d.Labels["app.kubernetes.io/managed-by"] != "virt-operator" {
			t.Errorf("deployment %s: image %s, labels %v", name, img, d.Labels)
		}
		// A drain keeps one replica of each.
		pdb, err := kube.PolicyV1().PodDisruptionBudgets("kubevirt").Get(ctx, name+"-pdb", metav1.GetOptions{})
		if err != nil {
			t.Errorf("PodDisruptionBudget %s-pdb: %v", name, err)
		} else if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Labels["app.kubernetes.io/managed-by"] != "virt-operator" {
			t.Errorf("PodDisruptionBudget %s-pdb: minAvailable %v, labels %v", name, pdb.Spec.MinAvailable, pdb.Labels)
		}
	}
	// The webhooks and the APIService trust exactly the published bundle.
	bundle, err := kube.CoreV1().ConfigMaps("kubevirt").Get(ctx, "kubevirt-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caBundle := []byte(bundle.Data["ca-bundle"])
	if !bytes.Contains(caBundle, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("kubevirt-ca bundle %q", caBundle)
	}
	for _, name := range []string{"virt-api-validator", "virt-operator-validator"} {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range w.Webhooks {
			if !bytes.Equal(h.ClientConfig.CABundle, caBundle) {
				t.Errorf("webhook %s/%s: caBundle is not kubevirt-ca's bundle", name, h.Name)
			}
		}
	}
	svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
	if err != nil || !bytes.Equal(svc.Spec.CABundle, caBundle) {
		t.Errorf("APIService: %v, caBundle equal to the bundle: %v", err, err == nil && bytes.Equal(svc.Spec.CABundle, caBundle))
	}
	// The front-proxy CA copy is kube-system's.
	src, err := kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := kube.CoreV1().ConfigMaps("kubevirt").Get(ctx, "virt-api-requestheader-ca", metav1.GetOptions{})
	if err != nil || cp.Data["ca.crt"] != src.Data["requestheader-client-ca-file"] {
		t.Errorf("virt-api-requestheader-ca: %v, same as the front-proxy CA: %v", err, err == nil && cp.Data["ca.crt"] == src.Data["requestheader-client-ca-file"])
	}
	secrets, err := kube.CoreV1().Secrets("kubevirt").List(ctx, metav1.ListOptions{LabelSelector: managedBy})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range secrets.Items {
		names = append(names, s.Name)
	}
	for _, want := range []string{"kubevirt-ca", "kubevirt-node-ca", "kubevirt-virt-api-certs", "kubevirt-virt-api-node-client", "kubevirt-operator-certs"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("secrets %v: no %s", names, want)
		}
	}
	t.Logf("virt-operator RSS: %s", operatorRSS(t, c))
}

// operatorRSS is the resident memory of each virt-operator process on the nodes (all share
// this host's /proc).
func operatorRSS(t testing.TB, c *localcluster.Cluster) string {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods("kubevirt").List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=virt-operator"})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, p := range pods.Items {
		uids[string(p.UID)] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, f := range procs {
		cmd, err := os.ReadFile(f)
		if err != nil || !bytes.HasPrefix(cmd, []byte("/usr/bin/virt-operator\x00")) {
			continue
		}
		dir := filepath.Dir(f)
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		mine := false
		for uid := range uids {
			if bytes.Contains(cg, []byte(strings.ReplaceAll(uid, "-", "_"))) || bytes.Contains(cg, []byte(uid)) {
				mine = true
			}
		}
		if !mine {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(dir, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				out = append(out, strings.Join(strings.Fields(strings.TrimPrefix(line, "VmRSS:")), " "))
			}
		}
	}
	if len(out) == 0 {
		t.Errorf("no virt-operator process of this cluster's pods found")
	}
	return strings.Join(out, ", ")
}

func TestOperatorPutsBackWhatIsDeletedOrChanged(t *testing.T) {
	c := localStack(t)
	ctx := context.Background()
	kube, agg := clients(t, c)
	adm := kube.AdmissionregistrationV1()
	apps := kube.AppsV1()
	// back waits until get finds the object again under a new UID, and says how long it took.
	back := func(t *testing.T, what string, old types.UID, get func() (metav1.Object, error)) {
		t.Helper()
		began := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			o, err := get()
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && o.GetUID() != old, err
		})
		if err != nil {
			dumpOperator(t, c)
			t.Fatalf("%s not put back: %v", what, err)
		}
		t.Logf("%s put back %v after its deletion", what, time.Since(began).Round(time.Millisecond))
	}
	cases := []struct {
		what string
		get  func() (metav1.Object, error)
		del  func() error
	}{
		{"deployment virt-api",
			func() (metav1.Object, error) {
				return apps.Deployments("kubevirt").Get(ctx, "virt-api", metav1.GetOptions{})
			},
			func() error { return apps.Deployments("kubevirt").Delete(ctx, "virt-api", metav1.DeleteOptions{}) }},
		{"daemonset virt-handler",
			func() (metav1.Object, error) {
				return apps.DaemonSets("kubevirt").Get(ctx, "virt-handler", metav1.GetOptions{})
			},
			func() error { return apps.DaemonSets("kubevirt").Delete(ctx, "virt-handler", metav1.DeleteOptions{}) }},
		{"service virt-api",
			func() (metav1.Object, error) {
				return kube.CoreV1().Services("kubevirt").Get(ctx, "virt-api", metav1.GetOptions{})
			},
			func() error {
				return kube.CoreV1().Services("kubevirt").Delete(ctx, "virt-api", metav1.DeleteOptions{})
			}},
		{"validating webhook configuration virt-api-validator",
			func() (metav1.Object, error) {
				return adm.ValidatingWebhookConfigurations().Get(ctx, "virt-api-validator", metav1.GetOptions{})
			},
			func() error {
				return adm.ValidatingWebhookConfigurations().Delete(ctx, "virt-api-validator", metav1.DeleteOptions{})
			}},
		{"APIService v1.subresources.kubevirt.io",
			func() (metav1.Object, error) {
				return agg.ApiregistrationV1().APIServices().Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
			},
			func() error {
				return agg.ApiregistrationV1().APIServices().Delete(ctx, "v1.subresources.kubevirt.io", metav1.DeleteOptions{})
			}},
		{"secret kubevirt-virt-api-certs",
			func() (metav1.Object, error) {
				return kube.CoreV1().Secrets("kubevirt").Get(ctx, "kubevirt-virt-api-certs", metav1.GetOptions{})
			},
			func() error {
				return kube.CoreV1().Secrets("kubevirt").Delete(ctx, "kubevirt-virt-api-certs", metav1.DeleteOptions{})
			}},
		{"cluster role kubevirt-controller",
			func() (metav1.Object, error) {
				return kube.RbacV1().ClusterRoles().Get(ctx, "kubevirt-controller", metav1.GetOptions{})
			},
			func() error {
				return kube.RbacV1().ClusterRoles().Delete(ctx, "kubevirt-controller", metav1.DeleteOptions{})
			}},
		{"cluster role binding kubevirt-handler",
			func() (metav1.Object, error) {
				return kube.RbacV1().ClusterRoleBindings().Get(ctx, "kubevirt-handler", metav1.GetOptions{})
			},
			func() error {
				return kube.RbacV1().ClusterRoleBindings().Delete(ctx, "kubevirt-handler", metav1.DeleteOptions{})
			}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.what, " ", "_"), func(t *testing.T) {
			o, err := tc.get()
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.del(); err != nil {
				t.Fatal(err)
			}
			back(t, tc.what, o.GetUID(), tc.get)
		})
	}
	t.Run("failurePolicy_set_to_Ignore", func(t *testing.T) {
		patch := []byte(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`)
		if _, err := adm.ValidatingWebhookConfigurations().Patch(ctx, "virt-api-validator", types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "someone"}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			w, err := adm.ValidatingWebhookConfigurations().Get(ctx, "virt-api-validator", metav1.GetOptions{})
			return err == nil && w.Webhooks[0].FailurePolicy != nil && string(*w.Webhooks[0].FailurePolicy) == "Fail", nil
		})
		if err != nil {
			t.Fatalf("failurePolicy not set back to Fail: %v", err)
		}
		t.Logf("failurePolicy set back to Fail after %v", time.Since(began).Round(time.Millisecond))
	})
	t.Run("deployment_args_changed", func(t *testing.T) {
		patch := []byte(`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--v=9"}]`)
		if _, err := apps.Deployments("kubevirt").Patch(ctx, "virt-controller", types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "someone"}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			d, err := apps.Deployments("kubevirt").Get(ctx, "virt-controller", metav1.GetOptions{})
			return err == nil && !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), "--v=9"), nil
		})
		if err != nil {
			t.Fatalf("virt-controller's args not set back: %v", err)
		}
	})
	// All of it works again: the CR is Available, and a VM starts and is reachable through
	// the subresource API.
	t.Logf("Available again %v after the last heal", waitAvailable(t, c, 5*time.Minute).Round(time.Millisecond))
	waitAPIServiceAvailable(t, agg)
	startVM(t, c, vmManifest("healed", "", "masquerade"))
	if err := kv(t, c).Delete(ctx, &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "healed"}}); err != nil {
		t.Fatal(err)
	}
}

func waitAPIServiceAvailable(t testing.TB, agg aggregator.Interface) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range s.Status.Conditions {
			if c.Type == "Available" {
				return c.Status == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("APIService not Available: %v", err)
	}
}

func TestDeletingTheKubeVirtCRIsRefusedWhileVMsExistAndUninstallsWithout(t *testing.T) {
	c := localStack(t)
	ctx := context.Background()
	kube, agg := clients(t, c)
	startVM(t, c, vmManifest("keeps-kubevirt", "", "masquerade"))
	out, err := c.K8s.Kubectl("delete", "-n", "kubevirt", "kv/kubevirt", "--wait=false").CombinedOutput()
	if want := "since there are still Virtual Machine Instances present"; err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("deleting the CR with a VM running: %v: %s, want a refusal saying %q", err, out, want)
	}
	if kvr := kubeVirtCR(t, c); kvr.DeletionTimestamp != nil || kvr.Status.Phase != v1.KubeVirtPhaseDeployed {
		t.Fatalf("after the refusal: deletion %v, phase %s", kvr.DeletionTimestamp, kvr.Status.Phase)
	}
	if err := c.DeleteVMs(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := c.K8s.Kubectl("delete", "-n", "kubevirt", "kv/kubevirt", "--timeout=5m").CombinedOutput(); err != nil {
		t.Fatalf("deleting the CR without VMs: %v: %s", err, out)
	}
	// Nothing the operator made is left.
	left := []string{}
	sel := metav1.ListOptions{LabelSelector: managedBy}
	if l, err := kube.AppsV1().Deployments("kubevirt").List(ctx, sel); err == nil {
		for _, d := range l.Items {
			left = append(left, "deployment "+d.Name)
		}
	}
	if l, err := kube.AppsV1().DaemonSets("kubevirt").List(ctx, sel); err == nil {
		for _, d := range l.Items {
			left = append(left, "daemonset "+d.Name)
		}
	}
	if l, err := kube.CoreV1().Secrets("kubevirt").List(ctx, sel); err == nil {
		for _, s := range l.Items {
			left = append(left, "secret "+s.Name)
		}
	}
	if l, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, sel); err == nil {
		for _, w := range l.Items {
			left = append(left, "webhook "+w.Name)
		}
	}
	if l, err := kube.RbacV1().ClusterRoles().List(ctx, sel); err == nil {
		for _, r := range l.Items {
			left = append(left, "clusterrole "+r.Name)
		}
	}
	if _, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1.subresources.kubevirt.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("apiservice (%v)", err))
	}
	if len(left) > 0 {
		t.Errorf("left after uninstalling: %v", left)
	}

	// Installed again from the CR, as a user would.
	began := time.Now()
	if out, err := c.K8s.Kubectl("apply", "-f", filepath.Join(c.Root(), "deploy", "kubevirt-cr.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("applying the CR again: %v: %s", err, out)
	}
	waitAvailable(t, c, 5*time.Minute)
	t.Logf("kubectl apply of the KubeVirt CR -> Available: %v (images already on the nodes)", time.Since(began).Round(time.Millisecond))
	waitAPIServiceAvailable(t, agg)
	if err := c.WaitSchedulable(ctx); err != nil {
		t.Fatal(err)
	}
	startVM(t, c, vmManifest("after-reinstall", "", "masquerade"))
	if err := c.DeleteVMs(ctx); err != nil {
		t.Fatal(err)
	}
}
