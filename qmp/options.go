package qmp

import (
	"time"

	"github.com/go-logr/logr"
)

// DefaultTimeout bounds Dial and every call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout       time.Duration
	log           logr.Logger
	retryInterval time.Duration
}

func defaultOptions() options {
	return options{timeout: DefaultTimeout, log: logr.Discard()}
}

// WithTimeout sets the timeout applied to Dial and to every call whose context
// has no deadline of its own. d <= 0 disables it, leaving only the context.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithLogger sets the logger; the default discards everything. Connection
// loss is logged at V(0), dropped events, late replies and skipped messages
// at V(1).
func WithLogger(l logr.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithDialRetry makes Dial retry every interval while the socket does not
// exist yet or refuses connections, until the Dial context ends. It covers
// the moment between starting QEMU and QEMU creating its monitor socket.
func WithDialRetry(interval time.Duration) Option {
	return func(o *options) { o.retryInterval = interval }
}
