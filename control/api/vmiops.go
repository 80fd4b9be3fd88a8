package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// runningVMI loads a VMI that must be Running and finds its node agent. A VMI that is not
// running yet answers 400, which makes virtctl console retry while the VM boots.
func (s *Server) runningVMI(ctx context.Context, ns, name string) (*v1.VirtualMachineInstance, nodeapi.Endpoint, error) {
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return nil, nodeapi.Endpoint{}, err
	}
	if vmi == nil {
		return nil, nodeapi.Endpoint{}, notFound(`virtualmachineinstance.kubevirt.io "%s" not found`, name)
	}
	if vmi.Status.Phase != v1.Running {
		return nil, nodeapi.Endpoint{}, badRequest("Unable to connect to VM because phase is %s instead of Running", phaseOr(vmi.Status.Phase))
	}
	ep, err := s.opts.Nodes.Endpoint(ctx, vmi.Status.NodeName)
	if err != nil {
		return nil, nodeapi.Endpoint{}, err
	}
	return vmi, ep, nil
}

func phaseOr(p v1.VirtualMachineInstancePhase) string {
	if p == "" {
		return "Pending"
	}
	return string(p)
}

func isPaused(vmi *v1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstancePaused && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// command relays pause, unpause, reset and softreboot to the node agent.
func (s *Server) command(cmd nodeapi.Command) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var o v1.PauseOptions
		if err := decodeBody(r, &o); err != nil {
			writeError(w, err)
			return
		}
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		vmi, ep, err := s.runningVMI(r.Context(), ns, name)
		if err != nil {
			if se, ok := err.(*statusError); ok && se.code == http.StatusBadRequest {
				err = conflict("VM is not running")
			}
			writeError(w, err)
			return
		}
		switch {
		case cmd == nodeapi.Pause && isPaused(vmi):
			writeError(w, conflict("VMI is already paused"))
			return
		case cmd == nodeapi.Unpause && !isPaused(vmi):
			writeError(w, conflict("VMI is not paused"))
			return
		}
		if dryRun(o.DryRun) {
			w.WriteHeader(http.StatusOK)
			return
		}
		if err := s.opts.NodeClient.Command(r.Context(), ep, nodeapi.VMI{Namespace: ns, Name: name}, cmd); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

func (s *Server) screenshot(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	_, ep, err := s.runningVMI(r.Context(), ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	png, err := s.opts.NodeClient.Screenshot(r.Context(), ep, nodeapi.VMI{Namespace: ns, Name: name})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(png)
}

// guestAgent answers guestosinfo, userlist and filesystemlist from what the VM's guest agent
// last reported to its node agent (409 while no agent answers, as KubeVirt).
func (s *Server) guestAgent(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	_, ep, err := s.runningVMI(r.Context(), ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	info, err := s.opts.NodeClient.GuestAgent(r.Context(), ep, nodeapi.VMI{Namespace: ns, Name: name})
	if err != nil {
		writeError(w, err)
		return
	}
	switch r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:] {
	case "userlist":
		list := v1.VirtualMachineInstanceGuestOSUserList{Items: info.UserList}
		if list.Items == nil {
			list.Items = []v1.VirtualMachineInstanceGuestOSUser{}
		}
		writeJSON(w, http.StatusOK, list)
	case "filesystemlist":
		writeJSON(w, http.StatusOK, v1.VirtualMachineInstanceFileSystemList{Items: info.FSInfo.Filesystems})
	default:
		writeJSON(w, http.StatusOK, info)
	}
}

func (s *Server) console(w http.ResponseWriter, r *http.Request) {
	s.relay(w, r, ConsoleStream, func(ctx context.Context, ep nodeapi.Endpoint, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
		return s.opts.NodeClient.Console(ctx, ep, vmi)
	})
}

func (s *Server) vnc(w http.ResponseWriter, r *http.Request) {
	preserve, _ := strconv.ParseBool(r.URL.Query().Get("preserveSession"))
	s.relay(w, r, VNCStream, func(ctx context.Context, ep nodeapi.Endpoint, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
		return s.opts.NodeClient.VNC(ctx, ep, vmi, preserve)
	})
}

// portForward serves both virtualmachines/{name} and virtualmachineinstances/{name}: a VM's
// instance carries the VM's name.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, badRequest("port %q is not a valid port", r.PathValue("port")))
		return
	}
	proto := r.PathValue("protocol")
	if proto != "tcp" && proto != "udp" {
		writeError(w, badRequest("protocol %q is neither tcp nor udp", proto))
		return
	}
	s.relay(w, r, PortForwardStream, func(ctx context.Context, ep nodeapi.Endpoint, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
		return s.opts.NodeClient.PortForward(ctx, ep, vmi, port, proto)
	})
}

// vsock connects to a port of the guest's VSOCK device, as KubeVirt's subresource: ?port=N
// and ?tls= (true unless given). TLS to the guest's service is not offered: tls=false is needed.
func (s *Server) vsock(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	port, err := strconv.ParseUint(q.Get("port"), 10, 32)
	if err != nil || port == 0 {
		writeError(w, badRequest("port %q is not a valid VSOCK port", q.Get("port")))
		return
	}
	if tls := q.Get("tls"); tls == "" || tls == "true" {
		writeError(w, badRequest("qvirt does not support TLS over VSOCK (tls=true, the default): connect with tls=false"))
		return
	} else if tls != "false" {
		writeError(w, badRequest("tls %q is neither true nor false", tls))
		return
	}
	check := func(vmi *v1.VirtualMachineInstance) error {
		if !vmi.Spec.Domain.Devices.WantsVSOCK() {
			return badRequest("VSOCK is not attached.")
		}
		return nil
	}
	s.relayChecked(w, r, VSOCKStream, check, func(ctx context.Context, ep nodeapi.Endpoint, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
		return s.opts.NodeClient.VSOCK(ctx, ep, vmi, uint32(port))
	})
}

var upgrader = websocket.Upgrader{
	Subprotocols: []string{nodeapi.Subprotocol},
	// Requests arrive through the kube-apiserver's aggregation layer, authenticated there;
	// no browser talks to virt-api directly.
	CheckOrigin: func(*http.Request) bool { return true },
}

// relay opens the node agent's stream before upgrading, so a VM that cannot be reached gets a
// plain HTTP error (and virtctl's retry), then splices the two websockets, counting the stream
// in kind while it lasts.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, kind StreamKind, open func(context.Context, nodeapi.Endpoint, nodeapi.VMI) (io.ReadWriteCloser, error)) {
	s.relayChecked(w, r, kind, nil, open)
}

// relayChecked is relay for a stream that only some VMIs have: check refuses the others.
func (s *Server) relayChecked(w http.ResponseWriter, r *http.Request, kind StreamKind, check func(*v1.VirtualMachineInstance) error, open func(context.Context, nodeapi.Endpoint, nodeapi.VMI) (io.ReadWriteCloser, error)) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	obj, ep, err := s.runningVMI(r.Context(), ns, name)
	if err == nil && check != nil {
		err = check(obj)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	vmi := nodeapi.VMI{Namespace: ns, Name: name}
	backend, err := open(context.WithoutCancel(r.Context()), ep, vmi)
	if err != nil {
		writeError(w, fmt.Errorf("%s: %w", vmi, err))
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		backend.Close()
		return
	}
	log := s.opts.Log.WithValues("vmi", vmi.String(), "user", userFrom(r.Context()).Name, "path", r.URL.Path)
	log.Info("stream opened")
	closed := s.opts.Streams.Open(kind, ns, name)
	nodeapi.SpliceTimeout(nodeapi.NewWebsocketStream(ws), backend, s.opts.StreamWriteTimeout)
	closed()
	log.Info("stream closed")
}
