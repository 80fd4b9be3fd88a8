package handler

import (
	"context"
	"sync"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/metrics"
)

// StatsPoller refreshes every running VM's statistics on an interval, so that scrapes read a
// cache: one launcher Stats call per VM per interval, however often Prometheus scrapes.
type StatsPoller struct {
	H        *Handler
	Interval time.Duration
}

// Start polls until ctx ends (it is a controller-runtime Runnable).
func (p StatsPoller) Start(ctx context.Context) error {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		p.H.pollStats(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pollStats refreshes every VM's statistics at once, each call with its own deadline, so a
// launcher that does not answer delays nobody else's.
func (h *Handler) pollStats(ctx context.Context) {
	h.mu.Lock()
	states := make([]*vmState, 0, len(h.vms))
	for _, st := range h.vms {
		states = append(states, st)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.pollVMStats(ctx, st)
		}()
	}
	wg.Wait()
}

func (h *Handler) pollVMStats(ctx context.Context, st *vmState) {
	lc := st.launcher()
	if lc == nil || !running(st.lastStatus()) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	stats, err := lc.client.Stats(sctx, &launcherapi.Empty{})
	cancel()
	if err != nil {
		h.log.V(1).Info("stats", "vmi", st.key.String(), "err", err.Error())
		return
	}
	st.mu.Lock()
	taps := map[string]string{}
	var names []string
	for iface, nic := range st.nics {
		if nic.TapName != "" {
			taps[nic.TapName] = iface
			names = append(names, nic.TapName)
		}
	}
	st.mu.Unlock()
	byIface := map[string]metrics.NetStats{}
	if len(names) > 0 {
		if counters, err := metrics.ReadNetDev(lc.pid, names...); err == nil {
			for tap, c := range counters {
				byIface[taps[tap]] = c
			}
		}
	}
	st.mu.Lock()
	st.stats, st.net = stats, byIface
	st.mu.Unlock()
}

// Snapshot is the metrics collector's view of the cache.
func (h *Handler) Snapshot() []metrics.VM {
	h.mu.Lock()
	states := make([]*vmState, 0, len(h.vms))
	for _, st := range h.vms {
		states = append(states, st)
	}
	h.mu.Unlock()
	out := make([]metrics.VM, 0, len(states))
	for _, st := range states {
		st.mu.Lock()
		if st.stats != nil && running(st.last) {
			out = append(out, metrics.VM{Namespace: st.key.Namespace, Name: st.key.Name, Labels: st.labels, Stats: st.stats, Interfaces: st.net,
				Filesystems: st.last.GetGuestAgent().GetFilesystems()})
		}
		st.mu.Unlock()
	}
	return out
}
