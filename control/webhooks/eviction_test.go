/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"context"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

type fakeEvictions struct {
	pod    *corev1.Pod
	vmi    *v1.VirtualMachineInstance
	marked string
}

func (f *fakeEvictions) Pod(context.Context, string, string) (*corev1.Pod, error) { return f.pod, nil }
func (f *fakeEvictions) VMI(context.Context, string, string) (*v1.VirtualMachineInstance, error) {
	return f.vmi, nil
}
func (f *fakeEvictions) MarkEvacuation(_ context.Context, _ *v1.VirtualMachineInstance, node string) error {
	f.marked = node
	return nil
}

type clusterStrategy v1.EvictionStrategy

func (c clusterStrategy) FeatureGateEnabled(string) bool { return false }
func (c clusterStrategy) ClusterEvictionStrategy() v1.EvictionStrategy {
	return v1.EvictionStrategy(c)
}

func evictionFixture(strategy *v1.EvictionStrategy, migratable bool) *fakeEvictions {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"},
		Spec:   v1.VirtualMachineInstanceSpec{EvictionStrategy: strategy},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "n1"}}
	st := corev1.ConditionFalse
	if migratable {
		st = corev1.ConditionTrue
	}
	vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceIsMigratable, Status: st}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-abcde", Namespace: "ns", Labels: map[string]string{
		v1.AppLabel: v1.VirtLauncherAppLabelValue, v1.CreatedByLabel: "u1", v1.DeprecatedVirtualMachineNameLabel: "vm"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	return &fakeEvictions{pod: pod, vmi: vmi}
}

func TestEvictionOfALauncherPod(t *testing.T) {
	lm, lmip, ext, none := v1.EvictionStrategyLiveMigrate, v1.EvictionStrategyLiveMigrateIfPossible, v1.EvictionStrategyExternal, v1.EvictionStrategyNone
	for _, tc := range []struct {
		name       string
		strategy   *v1.EvictionStrategy
		cluster    v1.EvictionStrategy
		migratable bool
		code       int32 // 0: allowed
		marked     bool
	}{
		{"no strategy", nil, "", true, 0, false},
		{"None", &none, lm, true, 0, false},
		{"LiveMigrate, migratable", &lm, "", true, http.StatusTooManyRequests, true},
		{"LiveMigrate, not migratable", &lm, "", false, http.StatusTooManyRequests, false},
		{"LiveMigrateIfPossible, migratable", &lmip, "", true, http.StatusTooManyRequests, true},
		{"LiveMigrateIfPossible, not migratable", &lmip, "", false, 0, false},
		{"External", &ext, "", false, http.StatusTooManyRequests, true},
		{"the cluster's LiveMigrate", nil, lm, true, http.StatusTooManyRequests, true},
	} {
		f := evictionFixture(tc.strategy, tc.migratable)
		s := &server{cfg: clusterStrategy(tc.cluster), opts: Options{Evictions: f}.withDefaults()}
		req := &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns", Name: f.pod.Name,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "eviction"}
		resp := s.validateEviction(req)
		switch {
		case tc.code == 0 && !resp.Allowed:
			t.Errorf("%s: refused: %+v", tc.name, resp.Result)
		case tc.code != 0 && (resp.Allowed || resp.Result.Code != tc.code):
			t.Errorf("%s: %+v, want refused with %d", tc.name, resp.Result, tc.code)
		case tc.marked != (f.marked == "n1"):
			t.Errorf("%s: evacuation of node %q, want marked=%v", tc.name, f.marked, tc.marked)
		}
	}

	// A migration's target pod, and a pod that ended, are evicted whatever the strategy.
	f := evictionFixture(&lm, true)
	f.pod.Spec.NodeName = "n2"
	s := &server{cfg: StaticConfig{}, opts: Options{Evictions: f}.withDefaults()}
	req := &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns", Name: f.pod.Name,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "eviction"}
	if resp := s.validateEviction(req); !resp.Allowed || f.marked != "" {
		t.Errorf("the target pod's eviction: %+v, marked %q", resp.Result, f.marked)
	}
	f = evictionFixture(&lm, true)
	f.pod.Status.Phase = corev1.PodSucceeded
	s.opts.Evictions = f
	if resp := s.validateEviction(req); !resp.Allowed {
		t.Errorf("an ended pod's eviction: %+v", resp.Result)
	}
}
