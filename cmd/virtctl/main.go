// virtctl is KubeVirt's command line client for qvirt: start, stop, console, VNC,
// port-forward and the other subresource commands, over the kubeconfig as kubectl uses it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/commands"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := commands.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
