package qmp

import (
	"context"
	"fmt"
	"sync"
	"time"

	goqmp "github.com/digitalocean/go-qemu/qmp"
)

// Event is an asynchronous QMP event.
type Event struct {
	Name string
	// Data is shared between all subscribers: treat it as read-only.
	Data      map[string]any
	Timestamp time.Time
}

func eventFrom(e goqmp.Event) Event {
	return Event{
		Name:      e.Event,
		Data:      e.Data,
		Timestamp: time.Unix(e.Timestamp.Seconds, e.Timestamp.Microseconds*int64(time.Microsecond)),
	}
}

// subscription is one Subscribe call: a buffered channel the reader sends to
// without ever blocking.
type subscription struct {
	ch      chan Event
	dropped uint64 // guarded by fanout.mu
}

// fanout delivers events to subscribers. The reader goroutine calls publish;
// a full subscriber loses the event instead of stalling the reader, which
// also carries command replies.
type fanout struct {
	mu      sync.Mutex
	subs    map[*subscription]struct{}
	closed  bool
	dropped uint64
}

// Subscribe returns a channel receiving every event from now on, and a
// function that ends the subscription and closes the channel. The channel has
// room for buffer events (at least 1); when it is full, further events for it
// are dropped and counted in Dropped, so a slow subscriber never delays
// replies or other subscribers. The channel is closed when the connection
// ends; subscribing after that returns a closed channel.
func (c *Client) Subscribe(buffer int) (events <-chan Event, cancel func()) {
	s := &subscription{ch: make(chan Event, max(buffer, 1))}
	f := &c.events
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		close(s.ch)
		return s.ch, func() {}
	}
	if f.subs == nil {
		f.subs = make(map[*subscription]struct{})
	}
	f.subs[s] = struct{}{}
	f.mu.Unlock()

	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if _, ok := f.subs[s]; ok {
				delete(f.subs, s)
				close(s.ch)
			}
		})
	}
}

// Dropped returns how many event deliveries were dropped because a
// subscriber's channel was full, over all subscriptions.
func (c *Client) Dropped() uint64 {
	c.events.mu.Lock()
	defer c.events.mu.Unlock()
	return c.events.dropped
}

func (c *Client) publish(e Event) {
	f := &c.events
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		select {
		case s.ch <- e:
		default:
			if s.dropped == 0 {
				c.log.V(1).Info("QMP subscriber is full, dropping events", "event", e.Name, "buffer", cap(s.ch))
			}
			s.dropped++
			f.dropped++
		}
	}
}

// closeSubscribers ends every subscription once the connection is gone.
func (c *Client) closeSubscribers() {
	f := &c.events
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		close(s.ch)
	}
	f.subs = nil
}

// WaitEvent receives from events until match returns true (nil matches any
// event). It fails with ErrDisconnected if the channel is closed and with the
// context's error if ctx ends first. Subscribe before sending the command
// whose event you wait for, or the event may come before the subscription.
func WaitEvent(ctx context.Context, events <-chan Event, match func(Event) bool) (Event, error) {
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return Event{}, fmt.Errorf("waiting for event: %w", ErrDisconnected)
			}
			if match == nil || match(e) {
				return e, nil
			}
		case <-ctx.Done():
			return Event{}, fmt.Errorf("waiting for event: %w", ctxError(ctx))
		}
	}
}

// EventName returns a matcher for WaitEvent that accepts events by name.
func EventName(name string) func(Event) bool {
	return func(e Event) bool { return e.Name == name }
}
