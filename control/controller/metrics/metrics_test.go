package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestObservePhaseTransition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second registration in the same registry reuses the collector.
	m2, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	vmi.Status.Phase = virtv1.Scheduling
	vmi.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: virtv1.Scheduling, PhaseTransitionTimestamp: metav1.NewTime(created.Add(3 * time.Second))},
	}
	m.ObservePhaseTransition(vmi, created.Add(time.Hour))
	vmi.Status.Phase = virtv1.Running
	m2.ObservePhaseTransition(vmi, created.Add(7*time.Second))
	vmi.Status.Phase = ""
	m.ObservePhaseTransition(vmi, created)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{} // phase -> count, sum
	for _, mf := range mfs {
		if mf.GetName() != PhaseTransitionFromCreationName {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			got[m.GetLabel()[0].GetValue()] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
		}
	}
	want := map[string][2]float64{"Scheduling": {1, 3}, "Running": {1, 7}}
	if len(got) != len(want) || got["Scheduling"] != want["Scheduling"] || got["Running"] != want["Running"] {
		t.Errorf("observed %v, want %v", got, want)
	}
}
