// Package api is virt-api's aggregated API (subresources.kubevirt.io/v1): discovery and
// version, VM start/stop/restart/migrate, volume hotplug and memory dumps done by patching
// objects, and the VMI commands and streams relayed to the node agent running the VM. It keeps
// no state of its own, so any number of replicas can serve it.
package api

import (
	"context"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// Clients hands out API clients; they may be rebuilt when the configured rate limits change.
type Clients interface {
	KubeVirt() client.Client
	Kube() kubernetes.Interface
}

// Authorizer decides whether a user may use a subresource.
type Authorizer interface {
	Allowed(ctx context.Context, u User, verb, namespace, resource, subresource, name string) (bool, string, error)
}

// NodeResolver finds the node agent endpoint for a node.
type NodeResolver interface {
	Endpoint(ctx context.Context, nodeName string) (nodeapi.Endpoint, error)
}

// Options wire the server to the cluster.
type Options struct {
	Clients    Clients
	Authn      *RequestHeaderAuth
	Authz      Authorizer
	Nodes      NodeResolver
	NodeClient *nodeapi.Client
	// MaxBodyBytes caps a request's body (DefaultMaxBodyBytes when zero); a larger one is
	// answered 413. The subresources' options are a few hundred bytes.
	MaxBodyBytes int64
	// StreamWriteTimeout bounds each write of a console, VNC or port-forward stream, to the
	// user or to the node agent (0: no bound): a side that stops reading for that long loses
	// the stream.
	StreamWriteTimeout time.Duration
	// Streams counts the open streams (nil: not counted).
	Streams *StreamMetrics
	Log     logr.Logger
}

// DefaultMaxBodyBytes is the default of Options.MaxBodyBytes.
const DefaultMaxBodyBytes = 64 << 10

// Server serves the subresource API.
type Server struct {
	opts Options
	mux  *http.ServeMux
}

const prefix = "/apis/" + GroupName + "/v1"

// NewServer builds the handler.
func NewServer(opts Options) *Server {
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	ns := prefix + "/namespaces/{namespace}"

	// Discovery, version and health answer any authenticated caller.
	s.mux.Handle("GET /apis/"+GroupName, s.authenticated(s.discoveryGroup))
	s.mux.Handle("GET /apis/"+GroupName+"/{$}", s.authenticated(s.discoveryGroup))
	s.mux.Handle("GET "+prefix, s.authenticated(s.discoveryVersion))
	s.mux.Handle("GET "+prefix+"/{$}", s.authenticated(s.discoveryVersion))
	s.mux.Handle("GET "+prefix+"/version", s.authenticated(s.version))
	s.mux.Handle("GET "+prefix+"/healthz", s.authenticated(s.healthz))

	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/start", s.authorized("virtualmachines", "start", s.start))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/stop", s.authorized("virtualmachines", "stop", s.stop))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/restart", s.authorized("virtualmachines", "restart", s.restart))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/migrate", s.authorized("virtualmachines", "migrate", s.migrate))
	s.mux.Handle("GET "+ns+"/virtualmachines/{name}/portforward/{port}/{protocol}", s.authorized("virtualmachines", "portforward", s.portForward))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/addvolume", s.authorized("virtualmachines", "addvolume", s.vmAddVolume))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/removevolume", s.authorized("virtualmachines", "removevolume", s.vmRemoveVolume))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/memorydump", s.authorized("virtualmachines", "memorydump", s.memoryDump))
	s.mux.Handle("PUT "+ns+"/virtualmachines/{name}/removememorydump", s.authorized("virtualmachines", "removememorydump", s.removeMemoryDump))

	vmis := ns + "/virtualmachineinstances/{name}"
	for _, cmd := range nodeapi.Commands {
		s.mux.Handle("PUT "+vmis+"/"+string(cmd), s.authorized("virtualmachineinstances", string(cmd), s.command(cmd)))
	}
	s.mux.Handle("GET "+vmis+"/console", s.authorized("virtualmachineinstances", "console", s.console))
	s.mux.Handle("GET "+vmis+"/vnc", s.authorized("virtualmachineinstances", "vnc", s.vnc))
	s.mux.Handle("GET "+vmis+"/vnc/screenshot", s.authorized("virtualmachineinstances", "vnc/screenshot", s.screenshot))
	s.mux.Handle("GET "+vmis+"/portforward/{port}/{protocol}", s.authorized("virtualmachineinstances", "portforward", s.portForward))
	s.mux.Handle("GET "+vmis+"/vsock", s.authorized("virtualmachineinstances", "vsock", s.vsock))
	s.mux.Handle("PUT "+vmis+"/addvolume", s.authorized("virtualmachineinstances", "addvolume", s.vmiAddVolume))
	s.mux.Handle("PUT "+vmis+"/removevolume", s.authorized("virtualmachineinstances", "removevolume", s.vmiRemoveVolume))
	for _, sub := range []string{"guestosinfo", "userlist", "filesystemlist"} {
		s.mux.Handle("GET "+vmis+"/"+sub, s.authorized("virtualmachineinstances", sub, s.guestAgent))
	}
	return s
}

// ServeHTTP answers unknown paths with a Status, as an API server does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern == "" {
		writeError(w, notFound("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path))
		return
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		writeError(w, tooLarge(s.opts.MaxBodyBytes))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	// ServeMux.ServeHTTP, not the handler found above: it sets the request's path values.
	s.mux.ServeHTTP(w, r)
}

type userKey struct{}

func userFrom(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}

func (s *Server) authenticated(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := s.opts.Authn.Authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

// authorized checks the subresource with a SubjectAccessReview: PUT is verb update, GET is get.
func (s *Server) authorized(resource, subresource string, h http.HandlerFunc) http.Handler {
	return s.authenticated(func(w http.ResponseWriter, r *http.Request) {
		u := userFrom(r.Context())
		verb := "get"
		if r.Method == http.MethodPut {
			verb = "update"
		}
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		ok, reason, err := s.opts.Authz.Allowed(r.Context(), u, verb, ns, resource, subresource, name)
		if err != nil {
			s.opts.Log.Error(err, "authorization check failed", "user", u.Name)
			writeError(w, err)
			return
		}
		if !ok {
			msg := `%s.%s "%s" is forbidden: User "%s" cannot %s resource "%s/%s" in API group "%s" in the namespace "%s"`
			if reason != "" {
				msg += ": " + reason
			}
			writeError(w, forbidden(msg, resource, GroupName, name, u.Name, verb, resource, subresource, GroupName, ns))
			return
		}
		s.opts.Log.V(2).Info("subresource request", "user", u.Name, "verb", verb, "resource", resource+"/"+subresource, "namespace", ns, "name", name)
		h(w, r)
	})
}
