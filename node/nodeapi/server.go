package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"

	"github.com/qvirt/qvirt/internal/httplimit"
)

// errorBody is how the node agent reports a failure; Reason names one of the sentinel errors.
type errorBody struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

var reasons = []struct {
	err    error
	reason string
	code   int
}{
	{ErrNotFound, "NotFound", http.StatusNotFound},
	{ErrConflict, "Conflict", http.StatusConflict},
	{ErrSessionBusy, "SessionBusy", http.StatusServiceUnavailable},
	{ErrUnavailable, "Unavailable", http.StatusServiceUnavailable},
	{ErrBadRequest, "BadRequest", http.StatusBadRequest},
	// httplimit's 429 answers carry this reason too.
	{ErrTooManyRequests, "TooManyRequests", http.StatusTooManyRequests},
}

// maxBodyBytes caps request bodies: no request of the node API has one.
const maxBodyBytes = 4 << 10

// DefaultLimits are the node API's server limits unless configured otherwise. Its only client
// is virt-api, which opens a connection per request; commands wait for the launcher at most
// handler.Options.LauncherCallTimeout, well within WriteTimeout.
func DefaultLimits() httplimit.Limits {
	return httplimit.Limits{
		ReadHeaderTimeout:  10 * time.Second,
		ReadTimeout:        30 * time.Second,
		WriteTimeout:       60 * time.Second,
		IdleTimeout:        90 * time.Second,
		MaxHeaderBytes:     64 << 10,
		MaxInFlight:        100,
		MaxStreams:         512,
		RetryAfter:         time.Second,
		StreamWriteTimeout: 30 * time.Second,
	}
}

// NewServer returns the server of the node API over b, within lim. Authentication (mutual
// TLS) is the listener's job.
func NewServer(b Backend, log logr.Logger, lim httplimit.Limits) *http.Server {
	return lim.Server(httplimit.MaxBody(newHandler(b, log, lim.StreamWriteTimeout), maxBodyBytes))
}

// newHandler serves the node API over b; each write of a stream may block at most
// streamWriteTimeout.
func newHandler(b Backend, log logr.Logger, streamWriteTimeout time.Duration) http.Handler {
	s := &server{b: b, log: log, streamWriteTimeout: streamWriteTimeout, up: websocket.Upgrader{
		Subprotocols: []string{Subprotocol},
		// virt-api is the only client and authenticated by its certificate; browsers never
		// talk to this API, so the Origin check has nothing to protect.
		CheckOrigin: func(*http.Request) bool { return true },
	}}
	mux := http.NewServeMux()
	mux.HandleFunc(routeCommand, s.command)
	mux.HandleFunc(routeConsole, s.stream(func(ctx context.Context, vmi VMI, r *http.Request) (io.ReadWriteCloser, error) {
		return b.Console(ctx, vmi)
	}))
	mux.HandleFunc(routeVNC, s.stream(func(ctx context.Context, vmi VMI, r *http.Request) (io.ReadWriteCloser, error) {
		preserve, _ := strconv.ParseBool(r.URL.Query().Get("preserveSession"))
		return b.VNC(ctx, vmi, preserve)
	}))
	mux.HandleFunc(routePortForward, s.stream(func(ctx context.Context, vmi VMI, r *http.Request) (io.ReadWriteCloser, error) {
		port, err := strconv.Atoi(r.PathValue("port"))
		if err != nil || port < 1 || port > 65535 {
			return nil, fmt.Errorf("%w: port %q is not a TCP/UDP port", ErrBadRequest, r.PathValue("port"))
		}
		proto := r.PathValue("protocol")
		if proto != "tcp" && proto != "udp" {
			return nil, fmt.Errorf("%w: protocol %q is neither tcp nor udp", ErrBadRequest, proto)
		}
		return b.PortForward(ctx, vmi, port, proto)
	}))
	mux.HandleFunc(routeVSOCK, s.stream(func(ctx context.Context, vmi VMI, r *http.Request) (io.ReadWriteCloser, error) {
		port, err := strconv.ParseUint(r.PathValue("port"), 10, 32)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("%w: port %q is not a VSOCK port", ErrBadRequest, r.PathValue("port"))
		}
		return b.VSOCK(ctx, vmi, uint32(port))
	}))
	mux.HandleFunc(routeScreenshot, s.screenshot)
	mux.HandleFunc(routeGuestAgent, s.guestAgent)
	return mux
}

type server struct {
	b                  Backend
	log                logr.Logger
	up                 websocket.Upgrader
	streamWriteTimeout time.Duration
}

func vmiOf(r *http.Request) VMI {
	return VMI{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
}

func (s *server) command(w http.ResponseWriter, r *http.Request) {
	cmd := Command(r.PathValue("command"))
	known := false
	for _, c := range Commands {
		known = known || c == cmd
	}
	if !known {
		writeError(w, fmt.Errorf("%w: unknown command %q", ErrBadRequest, cmd))
		return
	}
	vmi := vmiOf(r)
	if err := s.b.Command(r.Context(), vmi, cmd); err != nil {
		s.log.V(1).Info("command failed", "vmi", vmi.String(), "command", cmd, "err", err.Error())
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *server) screenshot(w http.ResponseWriter, r *http.Request) {
	png, err := s.b.Screenshot(r.Context(), vmiOf(r))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(png)
}

func (s *server) guestAgent(w http.ResponseWriter, r *http.Request) {
	info, err := s.b.GuestAgent(r.Context(), vmiOf(r))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(info)
}

// stream opens the backend side first, so a failure is an ordinary HTTP error the client can
// act on (virtctl retries a console on 400-class answers while the VM boots).
func (s *server) stream(open func(context.Context, VMI, *http.Request) (io.ReadWriteCloser, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vmi := vmiOf(r)
		// The backend stream lives as long as the websocket, not the upgrade request.
		backend, err := open(context.WithoutCancel(r.Context()), vmi, r)
		if err != nil {
			writeError(w, err)
			return
		}
		ws, err := s.up.Upgrade(w, r, nil)
		if err != nil {
			backend.Close()
			return
		}
		log := s.log.WithValues("vmi", vmi.String(), "path", r.URL.Path)
		log.V(1).Info("stream opened")
		SpliceTimeout(NewWebsocketStream(ws), backend, s.streamWriteTimeout)
		log.V(1).Info("stream closed")
	}
}

func writeError(w http.ResponseWriter, err error) {
	body := errorBody{Reason: "InternalError", Message: err.Error()}
	code := http.StatusInternalServerError
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			body.Reason, code = r.reason, r.code
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// decodeError turns a node agent's error answer back into an error matching the sentinels.
func decodeError(code int, body []byte) error {
	var eb errorBody
	if json.Unmarshal(body, &eb) != nil || eb.Message == "" {
		eb.Message = fmt.Sprintf("node agent answered %d: %s", code, body)
	}
	for _, r := range reasons {
		if r.reason == eb.Reason {
			return &Error{Code: code, Message: eb.Message, kind: r.err}
		}
	}
	return &Error{Code: code, Message: eb.Message}
}

// Error is a failure reported by the node agent.
type Error struct {
	Code    int
	Message string
	kind    error
}

func (e *Error) Error() string { return e.Message }

// Unwrap lets errors.Is match the sentinel the node agent reported.
func (e *Error) Unwrap() error { return e.kind }
