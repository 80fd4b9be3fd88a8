package controlplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// TestCluster starts one control plane, runs the checks against it in parallel, then stops it.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	binDir := RequireBinaries(t)
	opts := Options{Dir: t.TempDir(), BinDir: binDir, Log: testr.New(t)}
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("checks", func(t *testing.T) {
		t.Run("kubectl", func(t *testing.T) {
			t.Parallel()
			out, err := c.Kubectl("get", "ns").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl get ns: %v\n%s", err, out)
			}
			for _, ns := range []string{"default", "kube-system"} {
				if !strings.Contains(string(out), ns) {
					t.Errorf("kubectl get ns lacks %s:\n%s", ns, out)
				}
			}
		})
		t.Run("version", func(t *testing.T) {
			t.Parallel()
			v, err := client.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" {
				t.Errorf("server version %+v, want v1.37.2 (1.37)", v)
			}
		})
		t.Run("scheduler binds a pod", func(t *testing.T) { t.Parallel(); testScheduling(t, client) })
		t.Run("rbac", func(t *testing.T) { t.Parallel(); testRBAC(t, c, client) })
		t.Run("garbage collection", func(t *testing.T) { t.Parallel(); testGarbageCollection(t, client) })
	})

	t.Run("stop leaves no process", func(t *testing.T) {
		pids := make(map[string]int)
		for _, p := range c.procs {
			pids[p.Name] = p.Pid()
		}
		if len(pids) != 4 {
			t.Fatalf("running processes %v, want etcd, kube-apiserver, kube-scheduler, kube-controller-manager", pids)
		}
		began := time.Now()
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped in %v", time.Since(began).Round(time.Millisecond))
		for name, pid := range pids {
			// Each process led its own group; signal 0 to the group finds any member left.
			if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s (process group %d) still has processes after Stop: %v", name, pid, err)
			}
			if info, err := os.Stat(filepath.Join(opts.Dir, "logs", name+".log")); err != nil || info.Size() == 0 {
				t.Errorf("log of %s: %v", name, err)
			}
		}
	})

	// Local mode restarts on the same directory: the CAs and etcd's data carry over.
	t.Run("restart keeps state", func(t *testing.T) {
		c2, err := Start(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Stop()
		client, err := kubernetes.NewForConfig(c2.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Namespaces().Get(t.Context(), "scheduling", metav1.GetOptions{}); err != nil {
			t.Errorf("namespace from the first run: %v", err)
		}
		if err := c2.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func poll(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	began := time.Now()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s after %v", what, time.Since(began).Round(time.Millisecond))
}

// namespace creates a namespace and waits for its default service account, which pod admission needs.
func namespace(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "default service account in "+name, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
	return name
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func testScheduling(t *testing.T, client kubernetes.Interface) {
	ctx := t.Context()
	ns := namespace(t, client, "scheduling")
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	// Created with its status: a node that starts without a Ready condition gets a not-ready taint.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "c",
			Image: "registry.invalid/none",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
			}},
		}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "pod bound to node-a", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "pod-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Spec.NodeName == "node-a", nil
	})
}

func testRBAC(t *testing.T, c *Cluster, admin kubernetes.Interface) {
	ctx := t.Context()
	ns := namespace(t, admin, "rbac")
	cfg, kubeconfig, err := c.UserConfig("alice", "qvirt:testers")
	if err != nil {
		t.Fatal(err)
	}
	alice, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists pods without a RoleBinding: %v, want 403 Forbidden", err)
	}
	if out, err := c.Kubectl("--kubeconfig="+kubeconfig, "auth", "whoami").CombinedOutput(); err != nil || !strings.Contains(string(out), "alice") {
		t.Errorf("kubectl auth whoami with alice's kubeconfig: %v\n%s", err, out)
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-reads-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer reads bindings from an informer, so the grant shows after a moment.
	poll(t, "alice may list pods", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := alice.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func testGarbageCollection(t *testing.T, client kubernetes.Interface) {
	ctx := t.Context()
	ns := namespace(t, client, "gc")
	cms := client.CoreV1().ConfigMaps(ns)
	parent, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "child",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: parent.Name, UID: parent.UID,
		}},
	}}
	if _, err := cms.Create(ctx, child, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, parent.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "child collected", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "child", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
