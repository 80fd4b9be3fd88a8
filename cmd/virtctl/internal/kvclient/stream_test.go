package kvclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
)

func newClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRefusedUpgradeKeepsTheHTTPStatus(t *testing.T) {
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "VM not ready", http.StatusBadRequest)
	})
	_, err := c.Stream(context.Background(), "ns", VirtualMachineInstances, "vm", nil, "console")
	if StreamCode(err) != http.StatusBadRequest || err.Error() != "Can't connect to websocket (400): VM not ready" {
		t.Errorf("error %v (code %d)", err, StreamCode(err))
	}
	if StreamCode(errors.New("other")) != 0 {
		t.Error("code of a plain error")
	}
}

func TestStreamNeedsThePlainSubprotocol(t *testing.T) {
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		up := websocket.Upgrader{} // does not echo the subprotocol
		if ws, err := up.Upgrade(w, r, nil); err == nil {
			ws.Close()
		}
	})
	if _, err := c.Stream(context.Background(), "ns", VirtualMachineInstances, "vm", nil, "vnc"); err == nil {
		t.Error("accepted a stream without plain.kubevirt.io")
	}
}

func TestMessagesKeepTheirBoundariesAndTextIsSkipped(t *testing.T) {
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		up := websocket.Upgrader{Subprotocols: []string{Subprotocol}}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("one"))
		_ = ws.WriteMessage(websocket.TextMessage, []byte("ignored"))
		_ = ws.WriteMessage(websocket.BinaryMessage, []byte("two"))
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	})
	conn, err := c.Stream(context.Background(), "ns", VirtualMachineInstances, "vm", nil, "portforward", "53", "udp")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, want := range []string{"one", "two"} {
		if msg, err := conn.ReadMessage(); err != nil || string(msg) != want {
			t.Errorf("message %q, %v; want %q", msg, err, want)
		}
	}
	if _, err := conn.ReadMessage(); err != io.EOF {
		t.Errorf("after the close frame: %v, want EOF", err)
	}
}
