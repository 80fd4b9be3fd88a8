package handler

import (
	"context"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// watch follows the launcher's event stream and re-queues the VMI on every event, so state
// changes (guest powered off, QEMU crashed, paused) reach the VMI within a reconcile.
func (h *Handler) watch(st *vmState) {
	st.mu.Lock()
	if st.watching || st.lc == nil {
		st.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.watching, st.cancel = true, cancel
	lc := st.lc
	st.mu.Unlock()

	go func() {
		defer func() {
			st.mu.Lock()
			st.watching = false
			st.mu.Unlock()
		}()
		stream, err := lc.client.Events(ctx, &launcherapi.Empty{})
		if err != nil {
			return
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					// Stream ended: the launcher exited or restarted; look again soon.
					time.Sleep(100 * time.Millisecond)
					h.requeue(st.key)
				}
				return
			}
			h.log.V(1).Info("launcher event", "vmi", st.key.String(), "state", ev.State.String(), "qmpEvent", ev.QmpEvent)
			h.requeue(st.key)
		}
	}()
}
