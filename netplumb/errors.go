package netplumb

import "errors"

var (
	// ErrLinkNotFound marks a link that a setup needs and the namespace lacks.
	ErrLinkNotFound = errors.New("netplumb: link not found")
	// ErrLinkConflict marks a name taken by a link that is not what netplumb would have made
	// (a bridge name held by a veth, a tap name held by a multi-queue tap...).
	ErrLinkConflict = errors.New("netplumb: link exists with another kind or settings")
	// ErrTapBusy is returned when another process (QEMU) already holds the tap's only queue.
	ErrTapBusy = errors.New("netplumb: tap is attached to another descriptor")
	// ErrNoAddress marks a pod interface without the IPv4 address a binding needs.
	ErrNoAddress = errors.New("netplumb: pod interface has no IPv4 address")
	// ErrRecord marks a bridge whose alias is not a record netplumb wrote, or one too long for
	// an alias.
	ErrRecord = errors.New("netplumb: bad binding record")
)
