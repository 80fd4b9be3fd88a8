package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// live returns the QMP client of a running QEMU, or ErrNotRunning.
func (v *VM) live() (*qmp.Client, error) {
	select {
	case <-v.exited:
		return nil, ErrNotRunning
	default:
	}
	if mon := v.monitor(); mon != nil {
		return mon, nil
	}
	return nil, ErrNotRunning
}

// Pause stops the guest's vCPUs.
func (v *VM) Pause(ctx context.Context) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	if err := mon.Stop(ctx); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	v.transition(launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED, "")
	return nil
}

// Unpause resumes the guest's vCPUs.
func (v *VM) Unpause(ctx context.Context) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	if err := mon.Cont(ctx); err != nil {
		return fmt.Errorf("unpause: %w", err)
	}
	v.transition(launcherapi.State_STATE_PAUSED, launcherapi.State_STATE_RUNNING, "")
	return nil
}

// Reset is a hard reset of the guest, like pressing the reset button.
func (v *VM) Reset(ctx context.Context) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	return mon.SystemReset(ctx)
}

// SoftReboot asks the guest to restart through ACPI: the power button is pressed, and when the
// guest has powered off it is reset and resumed instead of stopped (there is no guest agent).
func (v *VM) SoftReboot(ctx context.Context) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	v.mu.Lock()
	if v.stopping != intentNone {
		v.mu.Unlock()
		return fmt.Errorf("%w: the VM is shutting down", ErrNotRunning)
	}
	v.rebootPending = true
	v.mu.Unlock()
	if err := mon.SystemPowerdown(ctx); err != nil {
		v.mu.Lock()
		v.rebootPending = false
		v.mu.Unlock()
		return fmt.Errorf("soft reboot: %w", err)
	}
	return nil
}

// QMPStatus asks QEMU for its run state ("running", "paused", ...).
func (v *VM) QMPStatus(ctx context.Context) (string, error) {
	mon, err := v.live()
	if err != nil {
		return "", err
	}
	st, err := mon.Status(ctx)
	return st.Status, err
}

// Shutdown presses the ACPI power button, gives the guest grace to power off, then asks QEMU to
// quit and finally kills it. A grace of zero or less kills at once. The sequence runs to its end
// even if ctx ends; ctx only bounds how long the caller waits for it.
func (v *VM) Shutdown(ctx context.Context, grace time.Duration) error {
	if grace <= 0 {
		return v.Kill(ctx)
	}
	if _, err := v.live(); err != nil {
		return err
	}
	v.shutdownOnce.Do(func() {
		v.mu.Lock()
		if v.stopping == intentNone {
			v.stopping = intentShutdown
		}
		v.mu.Unlock()
		v.setState(launcherapi.State_STATE_SHUTTING_DOWN, "")
		go v.shutdownSequence(grace)
	})
	return v.Wait(ctx)
}

func (v *VM) shutdownSequence(grace time.Duration) {
	log := v.log.WithValues("grace", grace)
	if mon, err := v.live(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		if err := mon.SystemPowerdown(ctx); err != nil {
			log.Error(err, "ACPI power button failed; waiting out the grace period")
		}
		cancel()
	}
	select {
	case <-v.exited:
		return
	case <-time.After(grace):
	}
	log.Info("grace period exhausted, stopping QEMU")
	v.markKill("grace period exhausted, qemu stopped by the launcher")
	if mon, err := v.live(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		_ = mon.Quit(ctx)
		cancel()
	}
	select {
	case <-v.exited:
	case <-time.After(v.cfg.QuitTimeout):
		v.signalKill()
	}
}

// Kill ends QEMU at once with SIGKILL and waits for the exit to be recorded.
func (v *VM) Kill(ctx context.Context) error {
	select {
	case <-v.exited:
		return nil
	default:
	}
	if !v.hasProcess() {
		return ErrNotRunning
	}
	v.markKill("qemu killed by the launcher")
	v.signalKill()
	return v.Wait(ctx)
}

func (v *VM) markKill(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopping = intentKill
	v.killMsg = msg
}

func (v *VM) hasProcess() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cmd != nil
}

func (v *VM) signalKill() {
	v.mu.Lock()
	cmd := v.cmd
	v.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// Wait blocks until QEMU has exited or ctx ends.
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Screenshot returns the guest's display as PNG (QMP screendump into the VM directory).
func (v *VM) Screenshot(ctx context.Context) ([]byte, error) {
	mon, err := v.live()
	if err != nil {
		return nil, err
	}
	if !v.Spec().GetDevices().GetVnc() {
		return nil, fmt.Errorf("%w: the VM has no display", ErrInvalidSpec)
	}
	path := filepath.Join(v.layout.Dir, "screenshot.png")
	defer os.Remove(path)
	if err := mon.Screendump(ctx, path, "png"); err != nil {
		return nil, fmt.Errorf("screendump: %w", err)
	}
	return os.ReadFile(path)
}
