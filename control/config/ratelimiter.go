package config

import (
	"context"
	"sync"

	"k8s.io/client-go/util/flowcontrol"
)

// RateLimiter is a client rate limiter whose token bucket is replaced when the KubeVirt CR
// changes. Set as rest.Config.RateLimiter, it is shared by every client made from that config,
// so they all follow the CR without being rebuilt (KubeVirt's ReloadableRateLimiter).
type RateLimiter struct {
	mu     sync.RWMutex
	qps    float32
	burst  int
	bucket flowcontrol.RateLimiter
}

var _ flowcontrol.RateLimiter = (*RateLimiter)(nil)

// NewRateLimiter starts with qps and burst.
func NewRateLimiter(qps float32, burst int) *RateLimiter {
	return &RateLimiter{qps: qps, burst: burst, bucket: flowcontrol.NewTokenBucketRateLimiter(qps, burst)}
}

// Set replaces the bucket when qps or burst differ from the current ones, and reports whether it
// did: an unchanged limit keeps its bucket, so a CR edit elsewhere does not refill it. Requests
// already waiting finish their wait on the old bucket.
func (r *RateLimiter) Set(qps float32, burst int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if qps == r.qps && burst == r.burst {
		return false
	}
	r.qps, r.burst, r.bucket = qps, burst, flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	return true
}

// Limits are the QPS and burst in force.
func (r *RateLimiter) Limits() (qps float32, burst int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.qps, r.burst
}

func (r *RateLimiter) current() flowcontrol.RateLimiter {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bucket
}

func (r *RateLimiter) TryAccept() bool                { return r.current().TryAccept() }
func (r *RateLimiter) Accept()                        { r.current().Accept() }
func (r *RateLimiter) Stop()                          { r.current().Stop() }
func (r *RateLimiter) QPS() float32                   { return r.current().QPS() }
func (r *RateLimiter) Wait(ctx context.Context) error { return r.current().Wait(ctx) }

// RateLimiter returns a limiter that follows this component's rate limits in the CR from now on.
func (w *Watcher) RateLimiter() *RateLimiter {
	cur := w.Current()
	rl := NewRateLimiter(cur.QPS, cur.Burst)
	// Read Current rather than the listener's argument: listeners of two quick changes may run
	// out of order, and the limiter must end at the snapshot in force.
	w.OnChange(func(Snapshot) {
		s := w.Current()
		if rl.Set(s.QPS, s.Burst) {
			w.log.Info("client rate limit changed", "qps", s.QPS, "burst", s.Burst)
		}
	})
	// A change between Current above and OnChange would otherwise be missed.
	s := w.Current()
	rl.Set(s.QPS, s.Burst)
	return rl
}
