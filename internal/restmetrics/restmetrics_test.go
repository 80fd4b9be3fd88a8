package restmetrics

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, path, watch string
		resource, verb      string
	}{
		{"GET", "/api/v1/namespaces/default/pods", "", "pods", "list"},
		{"GET", "/api/v1/namespaces/default/pods", "true", "pods", "watch"},
		{"GET", "/api/v1/namespaces/default/pods/p1", "", "pods", "get"},
		{"POST", "/api/v1/namespaces/default/pods/p1/eviction", "", "pods/eviction", "create"},
		{"PUT", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm/status", "", "virtualmachineinstances/status", "update"},
		{"PATCH", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm", "", "virtualmachines", "patch"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "", "pods", "deletecollection"},
		{"DELETE", "/api/v1/nodes/n1", "", "nodes", "delete"},
		{"GET", "/api/v1/namespaces/kubevirt", "", "namespaces", "get"},
		{"GET", "/api/v1/namespaces", "", "namespaces", "list"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kubevirt/leases/l", "", "leases", "get"},
		{"GET", "/apis", "", "", "get"},
		{"GET", "/healthz", "", "", "get"},
	} {
		r, v := Classify(tc.method, tc.path, tc.watch)
		if r != tc.resource || v != tc.verb {
			t.Errorf("%s %s watch=%q: %q %q, want %q %q", tc.method, tc.path, tc.watch, r, v, tc.resource, tc.verb)
		}
	}
}

// TestInstrumentCountsByCode: a client made from an instrumented config counts each call with
// the server's status code.
func TestInstrumentCountsByCode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/x/pods/missing" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	reg := prometheus.NewRegistry()
	if err := Instrument(cfg, reg); err != nil {
		t.Fatal(err)
	}
	if err := Instrument(&rest.Config{Host: srv.URL}, reg); err != nil {
		t.Fatalf("second Instrument: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	host := srv.Listener.Addr().String()
	before404 := testutil.ToFloat64(Counter.WithLabelValues("404", "GET", host, "pods", "get"))
	before200 := testutil.ToFloat64(Counter.WithLabelValues("200", "GET", host, "pods", "list"))
	_, _ = cs.CoreV1().Pods("x").Get(t.Context(), "missing", metav1.GetOptions{})
	if _, err := cs.CoreV1().Pods("x").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(Counter.WithLabelValues("404", "GET", host, "pods", "get")) - before404; got != 1 {
		t.Errorf("404 get pods counted %v times, want 1", got)
	}
	if got := testutil.ToFloat64(Counter.WithLabelValues("200", "GET", host, "pods", "list")) - before200; got != 1 {
		t.Errorf("200 list pods counted %v times, want 1", got)
	}
}
