package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestKubeVirtAlertsOnTheRealComponents loads deploy/monitoring's rules into a real Prometheus
// that discovers the components' pods as the shipped scrape configuration says. The recording
// rules count the real virt-api, virt-controller and virt-handler pods, each component's REST
// client calls are seen, no component alert is pending or firing, and VMCannotBeEvicted fires
// for a running VM whose eviction strategy is LiveMigrate but which cannot move (bridge binding
// on the pod network), then resolves once the VM is gone.
func TestKubeVirtAlertsOnTheRealComponents(t *testing.T) {
	c := localStack(t)
	prom := startPrometheus(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	for _, comp := range []struct{ label, rule string }{
		{"virt-api", "kubevirt_virt_api_up"},
		{"virt-controller", "kubevirt_virt_controller_up"},
		{"virt-controller", "kubevirt_virt_controller_ready"},
		{"virt-handler", "kubevirt_virt_handler_up"},
	} {
		n := runningPods(t, c, comp.label)
		prom.waitFor(t, ctx, fmt.Sprintf("%s == %d", comp.rule, n))
		prom.waitFor(t, ctx, fmt.Sprintf(`count(kubevirt_rest_client_requests_total{namespace="kubevirt", pod=~"%s-.*"} > 0) > 0`, comp.label))
	}
	prom.waitFor(t, ctx, "kubevirt_virt_controller_leading == 1")
	// Before its first scrapes Prometheus counts zero components, so their alerts may be
	// pending at first; on a healthy cluster they clear, and none fires.
	const components = `alertname=~"VirtAPIDown|VirtControllerDown|NoReadyVirtController|NoLeadingVirtController|LowReadyVirtControllersCount"`
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := promQuery(ctx, prom.addr, "ALERTS{"+components+"}")
		return err == nil && n == 0, nil
	}); err != nil {
		t.Errorf("component alerts stay pending or firing on a healthy cluster: %v", err)
	}
	if n, err := promQuery(ctx, prom.addr, "count_over_time(ALERTS{"+components+`, alertstate="firing"}[10m])`); err != nil || n != 0 {
		t.Errorf("%d component alerts fired on a healthy cluster (%v)", n, err)
	}

	const name = "unmovable"
	m := strings.Replace(vmManifest(name, e2eNodes[0], "bridge"), "      terminationGracePeriodSeconds:", "      evictionStrategy: LiveMigrate\n      terminationGracePeriodSeconds:", 1)
	startVM(t, c, m)
	prom.waitFor(t, ctx, `kubevirt_vmi_non_evictable{name="`+name+`", namespace="default", node="`+e2eNodes[0]+`"} == 1`)
	start := time.Now()
	prom.waitFor(t, ctx, `ALERTS{alertname="VMCannotBeEvicted", alertstate="firing", name="`+name+`", namespace="default", severity="warning"}`)
	t.Logf("VMCannotBeEvicted fired %s after the series appeared (for: 1m)", time.Since(start).Round(time.Second))
	if n, err := promQuery(ctx, prom.addr, `ALERTS{alertname="VMCannotBeEvicted", name!="`+name+`"}`); err != nil || n != 0 {
		t.Errorf("VMCannotBeEvicted for %d other VMs (%v)", n, err)
	}

	if out, err := c.K8s.Kubectl("delete", "vm", name, "--wait=true", "--timeout=2m").CombinedOutput(); err != nil {
		t.Fatalf("kubectl delete vm %s: %v: %s", name, err, out)
	}
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := promQuery(ctx, prom.addr, `ALERTS{alertname="VMCannotBeEvicted", name="`+name+`"}`)
		return err == nil && n == 0, nil
	}); err != nil {
		t.Errorf("VMCannotBeEvicted stays after the VM went: %v", err)
	}
}

// runningPods counts the Running pods of a component in the install namespace.
func runningPods(t *testing.T, c *localcluster.Cluster, component string) int {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(localcluster.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "kubevirt.io=" + component})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == "Running" && p.DeletionTimestamp == nil {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no running %s pod", component)
	}
	return n
}
