package qmp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

var (
	// ErrDisconnected means the QMP connection is gone: every call waiting on
	// it, and every later call, fails with an error wrapping it.
	ErrDisconnected = errors.New("qmp: disconnected")

	// ErrClosed is the reason a connection ended when the caller closed it. It
	// wraps ErrDisconnected, so checking for ErrDisconnected is enough.
	ErrClosed = fmt.Errorf("%w: client closed", ErrDisconnected)

	// ErrTimeout means a deadline passed before QEMU answered. Errors wrapping
	// it caused by a context deadline also match context.DeadlineExceeded.
	ErrTimeout = errors.New("qmp: timeout")
)

// QMP error classes QEMU 7.2 sends in error replies.
const (
	ClassGenericError     = "GenericError"
	ClassCommandNotFound  = "CommandNotFound"
	ClassDeviceNotActive  = "DeviceNotActive"
	ClassDeviceNotFound   = "DeviceNotFound"
	ClassKVMMissingCap    = "KVMMissingCap"
	ClassMigrationBlocked = "MigrationBlocked"
)

// Error is an error reply from QEMU. Commands return it wrapped with the
// command name; use errors.As to inspect it.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string {
	return e.Class + ": " + e.Desc
}

// HasClass reports whether err wraps a QMP error reply of the given class.
func HasClass(err error, class string) bool {
	var qe *Error
	return errors.As(err, &qe) && qe.Class == class
}

// ctxError turns the end of a context into the package's error: a deadline
// becomes ErrTimeout (still matching context.DeadlineExceeded and any custom
// cause), a cancellation stays the context's cause.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	cause := context.Cause(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		if cause != nil && cause != err {
			return fmt.Errorf("%w: %w: %w", ErrTimeout, err, cause)
		}
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if cause != nil {
		return cause
	}
	return err
}

// connError classifies an I/O error on the connection.
func connError(err error) error {
	switch {
	case errors.Is(err, ErrDisconnected):
		return err
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: connection closed by QEMU", ErrDisconnected)
	default:
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
}

// isDeadline reports whether an I/O error came from a socket deadline.
func isDeadline(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
