package qmp

import (
	"context"
	"errors"
	"fmt"
)

// Run states reported by query-status (QEMU's RunState).
const (
	StatusDebug         = "debug"
	StatusInMigrate     = "inmigrate"
	StatusInternalError = "internal-error"
	StatusIOError       = "io-error"
	StatusPaused        = "paused"
	StatusPostMigrate   = "postmigrate"
	StatusPrelaunch     = "prelaunch"
	StatusFinishMigrate = "finish-migrate"
	StatusRestoreVM     = "restore-vm"
	StatusRunning       = "running"
	StatusSaveVM        = "save-vm"
	StatusShutdown      = "shutdown"
	StatusSuspended     = "suspended"
	StatusWatchdog      = "watchdog"
	StatusGuestPanicked = "guest-panicked"
	StatusColo          = "colo"
)

// StatusInfo is the reply of query-status. Status is kept as a string (see
// the Status* constants) so a run state newer than this package still
// decodes.
type StatusInfo struct {
	Status     string `json:"status"`
	Running    bool   `json:"running"`
	Singlestep bool   `json:"singlestep"`
}

// Status runs query-status.
func (c *Client) Status(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := c.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// Stop pauses the guest's vCPUs (stop); QEMU emits STOP.
func (c *Client) Stop(ctx context.Context) error {
	return c.Execute(ctx, "stop", nil, nil)
}

// Cont resumes the guest, or starts it from prelaunch (cont); QEMU emits
// RESUME.
func (c *Client) Cont(ctx context.Context) error {
	return c.Execute(ctx, "cont", nil, nil)
}

// SystemPowerdown asks the guest to power off through ACPI; it returns
// before the guest reacts, if it ever does.
func (c *Client) SystemPowerdown(ctx context.Context) error {
	return c.Execute(ctx, "system_powerdown", nil, nil)
}

// SystemReset resets the machine (system_reset).
func (c *Client) SystemReset(ctx context.Context) error {
	return c.Execute(ctx, "system_reset", nil, nil)
}

// Quit makes QEMU exit (quit). QEMU closes the socket right after replying,
// so losing the connection once the command was sent also counts as success.
// Wait on Done to see the connection end.
func (c *Client) Quit(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("qmp quit: %w", err)
	}
	err := c.Execute(ctx, "quit", nil, nil)
	if errors.Is(err, ErrDisconnected) && !errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}
