package nodeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Client calls node agents. Its TLS config is fetched per connection so rotated certificates
// apply without a restart.
type Client struct {
	tlsConfig func() (*tls.Config, error)
}

// NewClient returns a client that presents the certificate tlsConfig returns.
func NewClient(tlsConfig func() (*tls.Config, error)) *Client {
	return &Client{tlsConfig: tlsConfig}
}

// target checks ep and returns its base URL and the TLS config that verifies the agent's
// certificate is issued for ep's node.
func (c *Client) target(ep Endpoint) (string, *tls.Config, error) {
	u, err := ParseEndpoint(ep.URL)
	if err != nil {
		return "", nil, err
	}
	if ep.Node == "" {
		return "", nil, fmt.Errorf("node agent endpoint %s: no node name to verify its certificate against", ep.URL)
	}
	cfg, err := c.tlsConfig()
	if err != nil {
		return "", nil, err
	}
	cfg = cfg.Clone()
	cfg.ServerName = ServerName(ep.Node)
	return u.String(), cfg, nil
}

func httpClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// Command sends cmd to the VMI on the node agent at ep.
func (c *Client) Command(ctx context.Context, ep Endpoint, vmi VMI, cmd Command) error {
	_, err := c.do(ctx, http.MethodPut, ep, vmiPath(vmi, string(cmd)))
	return err
}

// Screenshot returns a PNG of the VMI's display.
func (c *Client) Screenshot(ctx context.Context, ep Endpoint, vmi VMI) ([]byte, error) {
	return c.do(ctx, http.MethodGet, ep, vmiPath(vmi, "screenshot"))
}

// GuestAgent asks the node agent what the VM's guest agent last reported.
func (c *Client) GuestAgent(ctx context.Context, ep Endpoint, vmi VMI) (*v1.VirtualMachineInstanceGuestAgentInfo, error) {
	body, err := c.do(ctx, http.MethodGet, ep, vmiPath(vmi, "guestagent"))
	if err != nil {
		return nil, err
	}
	var info v1.VirtualMachineInstanceGuestAgentInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("node agent's guest agent info: %w", err)
	}
	return &info, nil
}

func (c *Client) do(ctx context.Context, method string, ep Endpoint, path string) ([]byte, error) {
	base, cfg, err := c.target(ep)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient(cfg).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: node agent: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp.StatusCode, body)
	}
	return body, nil
}

// Console opens the VMI's serial console.
func (c *Client) Console(ctx context.Context, ep Endpoint, vmi VMI) (io.ReadWriteCloser, error) {
	return c.dial(ctx, ep, vmiPath(vmi, "console"))
}

// VNC opens the VMI's VNC display.
func (c *Client) VNC(ctx context.Context, ep Endpoint, vmi VMI, preserveSession bool) (io.ReadWriteCloser, error) {
	return c.dial(ctx, ep, vmiPath(vmi, "vnc")+fmt.Sprintf("?preserveSession=%t", preserveSession))
}

// PortForward opens a connection to port of the VMI's guest.
func (c *Client) PortForward(ctx context.Context, ep Endpoint, vmi VMI, port int, protocol string) (io.ReadWriteCloser, error) {
	return c.dial(ctx, ep, vmiPath(vmi, fmt.Sprintf("portforward/%d/%s", port, protocol)))
}

// VSOCK opens a connection to port of the VMI's VSOCK device.
func (c *Client) VSOCK(ctx context.Context, ep Endpoint, vmi VMI, port uint32) (io.ReadWriteCloser, error) {
	return c.dial(ctx, ep, vmiPath(vmi, fmt.Sprintf("vsock/%d", port)))
}

func (c *Client) dial(ctx context.Context, ep Endpoint, path string) (io.ReadWriteCloser, error) {
	base, cfg, err := c.target(ep)
	if err != nil {
		return nil, err
	}
	wsURL, err := url.Parse(base + path)
	if err != nil {
		return nil, err
	}
	wsURL.Scheme = strings.Replace(wsURL.Scheme, "http", "ws", 1)
	d := websocket.Dialer{TLSClientConfig: cfg, Subprotocols: []string{Subprotocol}, HandshakeTimeout: 30 * time.Second}
	ws, resp, err := d.DialContext(ctx, wsURL.String(), nil)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, decodeError(resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil, fmt.Errorf("%w: node agent: %v", ErrUnavailable, err)
	}
	return NewWebsocketStream(ws), nil
}
