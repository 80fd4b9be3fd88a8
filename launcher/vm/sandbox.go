package vm

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/qvirt/qvirt/launcher/qemuargs"
)

// sandboxProbeTimeout bounds the probe; a QEMU that cannot start with no machine in this time
// would not start a guest either.
const sandboxProbeTimeout = 15 * time.Second

// SandboxProbe is one run of probeSandbox, started early so that a VM's start need not wait
// for it.
type SandboxProbe struct {
	done chan struct{}
	err  error
}

// ProbeSandbox starts the probe for binary (qemu-system-x86_64 when empty) in the background.
func ProbeSandbox(binary string) *SandboxProbe {
	if binary == "" {
		binary = defaultQEMU
	}
	p := &SandboxProbe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = probeSandbox(context.Background(), binary)
	}()
	return p
}

// Wait returns the probe's verdict: nil when QEMU can run sandboxed.
func (p *SandboxProbe) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probeSandbox reports whether QEMU starts with its seccomp filter on here: the binary must be
// built with seccomp and the kernel (and the container's own filter) must let QEMU install it.
// It starts QEMU with no machine, which applies the filter, and quits it over the monitor.
func probeSandbox(ctx context.Context, binary string) error {
	ctx, cancel := context.WithTimeout(ctx, sandboxProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-sandbox", qemuargs.SandboxOptions,
		"-machine", "none", "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "stdio")
	cmd.Stdin = strings.NewReader("quit\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -sandbox %s: %w: %s", binary, qemuargs.SandboxOptions, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// awaitSandbox returns the probe's verdict, logging why QEMU runs without the filter.
func (v *VM) awaitSandbox(ctx context.Context) bool {
	if err := v.cfg.Sandbox.Wait(ctx); err != nil {
		v.log.Info("QEMU runs without its seccomp sandbox", "reason", err.Error())
		return false
	}
	return true
}
