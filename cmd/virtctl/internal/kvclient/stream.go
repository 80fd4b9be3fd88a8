package kvclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/transport"

	"github.com/qvirt/qvirt/internal/wsstream"
)

// Subprotocol is the websocket subprotocol of KubeVirt's console, VNC and port-forward streams.
const Subprotocol = wsstream.Subprotocol

// StreamError is a websocket upgrade the server refused with an HTTP error.
type StreamError struct {
	Code int
	// Status is the Kubernetes Status the server answered with, when it sent one.
	Status *metav1.Status
	Body   string
}

func (e *StreamError) Error() string {
	msg := strings.TrimSpace(e.Body)
	if e.Status != nil && e.Status.Message != "" {
		msg = e.Status.Message
	}
	return fmt.Sprintf("Can't connect to websocket (%d): %s", e.Code, msg)
}

// StreamCode returns the HTTP status of a refused upgrade, or 0 for any other error.
func StreamCode(err error) int {
	var se *StreamError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// Stream opens the websocket of a subresource, e.g. (ns, "virtualmachineinstances", name,
// nil, "console"). The returned connection carries one payload chunk per binary message.
func (c *Client) Stream(ctx context.Context, ns, resource, name string, query url.Values, subresource ...string) (*Conn, error) {
	req := c.sub.Get().Namespace(ns).Resource(resource).Name(name).SubResource(subresource...)
	for k, vs := range query {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	ws, err := c.dial(ctx, req.URL())
	if err != nil {
		return nil, err
	}
	return newConn(ws), nil
}

// dial runs the upgrade through client-go's transport wrappers, so bearer tokens, basic auth,
// impersonation and exec credential plugins apply as they do to REST calls; client
// certificates come with the TLS config.
func (c *Client) dial(ctx context.Context, u *url.URL) (*websocket.Conn, error) {
	tc, err := c.config.TransportConfig()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := transport.TLSConfigFor(tc)
	if err != nil {
		return nil, err
	}
	proxy := c.config.Proxy
	if proxy == nil {
		proxy = utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment)
	}
	up := &upgrader{dialer: websocket.Dialer{
		Proxy:            proxy,
		TLSClientConfig:  tlsConfig,
		Subprotocols:     []string{Subprotocol},
		HandshakeTimeout: 30 * time.Second,
	}}
	rt, err := transport.HTTPWrappersForConfig(tc, up)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.config.UserAgent != "" {
		req.Header.Set("User-Agent", c.config.UserAgent)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	return up.conn, nil
}

// upgrader is the innermost round tripper: it turns the authenticated request into a
// websocket handshake and keeps the connection.
type upgrader struct {
	dialer websocket.Dialer
	conn   *websocket.Conn
}

func (u *upgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	target := *req.URL
	switch target.Scheme {
	case "https":
		target.Scheme = "wss"
	case "http":
		target.Scheme = "ws"
	default:
		return nil, fmt.Errorf("unsupported URL scheme %q", target.Scheme)
	}
	conn, resp, err := u.dialer.DialContext(req.Context(), target.String(), req.Header)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			return nil, refused(resp)
		}
		return nil, err
	}
	if conn.Subprotocol() != Subprotocol {
		_ = conn.Close()
		return nil, fmt.Errorf("the server answered with websocket subprotocol %q, not %q", conn.Subprotocol(), Subprotocol)
	}
	u.conn = conn
	return resp, nil
}

func refused(resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	se := &StreamError{Code: resp.StatusCode, Body: string(b)}
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
		se.Status = &st
	}
	if se.Body == "" {
		se.Body = resp.Status
	}
	return se
}

// Conn is one stream: binary websocket messages as a byte stream (or datagrams, for UDP).
type Conn = wsstream.Conn

func newConn(ws *websocket.Conn) *Conn { return wsstream.New(ws, 0) }

// Splice copies both ways until either side ends, then closes both.
func Splice(a, b io.ReadWriteCloser) { wsstream.Splice(a, b) }
