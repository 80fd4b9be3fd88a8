package nodeapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/qvirt/qvirt/node/nodeapi"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

var vm1 = nodeapi.VMI{Namespace: "default", Name: "vm1"}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestConsoleStreamsBothWays(t *testing.T) {
	env := nodeapitest.Start(t, nodeapitest.NewFake(vm1))
	s, err := env.Client.Console(ctx(t), env.Endpoint, vm1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write([]byte("echo hi\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "echo hi\n" {
		t.Errorf("echo %q", got)
	}
}

func TestErrorsKeepTheirKind(t *testing.T) {
	fake := nodeapitest.NewFake(vm1)
	env := nodeapitest.Start(t, fake)
	c := ctx(t)
	if _, err := env.Client.Console(c, env.Endpoint, nodeapi.VMI{Namespace: "default", Name: "other"}); !errors.Is(err, nodeapi.ErrNotFound) {
		t.Errorf("unknown VMI: %v", err)
	}
	if err := env.Client.Command(c, env.Endpoint, vm1, nodeapi.Pause); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Command(c, env.Endpoint, vm1, nodeapi.Pause)
	var ne *nodeapi.Error
	if !errors.Is(err, nodeapi.ErrConflict) || !errors.As(err, &ne) || ne.Code != 409 || ne.Message != "conflict: VMI is already paused" {
		t.Errorf("second pause: %#v", err)
	}
	if err := env.Client.Command(c, env.Endpoint, vm1, nodeapi.Command("explode")); !errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("unknown command: %v", err)
	}
	if _, err := env.Client.PortForward(c, env.Endpoint, vm1, 70000, "tcp"); !errors.Is(err, nodeapi.ErrBadRequest) {
		t.Errorf("bad port: %v", err)
	}
}

func TestVNCSessionPreserve(t *testing.T) {
	env := nodeapitest.Start(t, nodeapitest.NewFake(vm1))
	c := ctx(t)
	first, err := env.Client.VNC(c, env.Endpoint, vm1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	hello := make([]byte, 12)
	if _, err := io.ReadFull(first, hello); err != nil || string(hello) != "RFB 003.008\n" {
		t.Fatalf("greeting %q %v", hello, err)
	}
	if _, err := env.Client.VNC(c, env.Endpoint, vm1, true); !errors.Is(err, nodeapi.ErrSessionBusy) {
		t.Errorf("preserveSession with a session open: %v", err)
	}
	second, err := env.Client.VNC(c, env.Endpoint, vm1, false)
	if err != nil {
		t.Fatalf("a new session replaces the old: %v", err)
	}
	defer second.Close()
	// The replaced session ends.
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, first); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the old VNC session stayed open")
	}
}

func TestScreenshotAndPortForward(t *testing.T) {
	fake := nodeapitest.NewFake(vm1)
	env := nodeapitest.Start(t, fake)
	c := ctx(t)
	png, err := env.Client.Screenshot(c, env.Endpoint, vm1)
	if err != nil || !bytes.Equal(png, fake.PNG) {
		t.Fatalf("screenshot %q %v", png, err)
	}
	s, err := env.Client.PortForward(c, env.Endpoint, vm1, 80, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	body, _ := io.ReadAll(s)
	if !bytes.Contains(body, []byte("guest vm1 port 80")) {
		t.Errorf("port-forward answer %q", body)
	}
}
