// Package qmp is a client for the QEMU Machine Protocol, made so that no call
// can hang.
//
// It keeps go-qemu's wire types (qmp.Command, qmp.Event, qmp.Version and the
// generated qmp/raw structs where they match QEMU 7.2) but not its
// SocketMonitor transport, which drops the class of error replies, reads lines
// of at most 64 KiB, can pair replies with the wrong command when an event
// arrives during the handshake, and cannot be cancelled. Instead:
//
//   - every command carries an id and a context (the client timeout applies
//     when the context has no deadline); one reader goroutine matches replies
//     to waiting calls by id, so commands may be in flight together and a
//     reply arriving after its caller gave up is simply discarded;
//   - events are fanned out to subscribers without blocking: a full
//     subscriber loses events (counted by Dropped), the reader never waits;
//   - when the connection ends, every waiting and later call fails with an
//     error wrapping ErrDisconnected, subscriber channels close, and Done is
//     closed after Err is set;
//   - error replies come back as *Error (errors.As) carrying class and
//     description, deadlines as ErrTimeout.
package qmp
