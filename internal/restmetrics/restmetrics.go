// Package restmetrics counts a component's Kubernetes API calls as KubeVirt's
// kubevirt_rest_client_requests_total, which its REST-error alerts divide by.
package restmetrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/qvirt/qvirt/internal/promreg"
)

// Name is KubeVirt's family name.
const Name = "kubevirt_rest_client_requests_total"

// Counter is the family; one per process, registered by Instrument.
var Counter = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: Name,
	Help: "Number of HTTP requests, partitioned by status code, method, and host.",
}, []string{"code", "method", "host", "resource", "verb"})

// Instrument makes every request through cfg count in Counter, registered with reg (once: a
// second registration in the same process is not an error).
func Instrument(cfg *rest.Config, reg prometheus.Registerer) error {
	if _, err := promreg.Register(reg, Counter); err != nil {
		return err
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &counting{next: rt} })
	return nil
}

type counting struct{ next http.RoundTripper }

func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	code := "<error>"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	resource, verb := Classify(req.Method, req.URL.Path, req.URL.Query().Get("watch"))
	Counter.WithLabelValues(code, req.Method, req.URL.Host, resource, verb).Inc()
	return resp, err
}

// Classify names the resource (with its subresource, "pods/eviction") and the Kubernetes verb
// of an API request path: /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] or
// /apis/GROUP/VERSION/... Paths that name no resource (discovery, /healthz) give "".
func Classify(method, path, watch string) (resource, verb string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", strings.ToLower(method)
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:] // a namespaced resource; "namespaces/NS" alone is the namespace itself
	}
	named := len(parts) >= 2
	switch len(parts) {
	case 0:
		return "", strings.ToLower(method)
	case 1, 2:
		resource = parts[0]
	default:
		resource = parts[0] + "/" + strings.Join(parts[2:], "/")
	}
	switch method {
	case http.MethodGet:
		switch {
		case watch == "true" || watch == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return resource, verb
}
