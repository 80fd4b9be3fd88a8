// Package httplimit bounds what one client can hold of an HTTP server: the time to send a
// request's headers and body, the time a request may take, idle keep-alive connections,
// header and body sizes, and how many requests and streams are served at once. virt-api and
// the node agent serve through it.
//
// Streams (websocket upgrades: console, VNC, port-forward) live as long as their session, so
// the per-request deadlines do not apply to them; they are counted separately, and each write
// of a stream gets its own deadline where it is spliced (wsstream.SpliceTimeout).
package httplimit

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// Limits of one server. A zero field means no bound.
type Limits struct {
	// ReadHeaderTimeout is how long a client may take to send a request's headers; a client
	// that never finishes them (slowloris) is dropped after it.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body, streams excepted.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of its answer, streams
	// excepted: the request's context ends then, and writing the answer may take a little
	// longer (writeGrace, at most WriteTimeout again) so that the error still reaches the
	// client.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections that carry no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers (net/http answers 431 above it).
	MaxHeaderBytes int
	// MaxInFlight caps the requests handled at once, streams excepted; MaxStreams caps the
	// open streams. A request beyond either is answered 429 with Retry-After.
	MaxInFlight, MaxStreams int
	// RetryAfter is what a 429 answer advises; at least a second.
	RetryAfter time.Duration
	// StreamWriteTimeout bounds every single write of a stream: a peer that stops reading for
	// that long has its stream closed. It is applied where streams are spliced.
	StreamWriteTimeout time.Duration
}

// writeGrace is how long after WriteTimeout an answer may still be written, so that a
// handler whose context just ended can report it.
const writeGrace = 5 * time.Second

func (l Limits) grace() time.Duration { return min(writeGrace, l.WriteTimeout) }

// RegisterFlags adds flags for every limit to fs, with l's values as defaults.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", l.ReadHeaderTimeout, "how long a client may take to send a request's headers; 0: no bound")
	fs.DurationVar(&l.ReadTimeout, "read-timeout", l.ReadTimeout, "how long a client may take to send a request's body (streams excepted); 0: no bound")
	fs.DurationVar(&l.WriteTimeout, "write-timeout", l.WriteTimeout, "how long a request may take until its answer is written (streams excepted); 0: no bound")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", l.IdleTimeout, "how long an idle keep-alive connection stays open; 0: no bound")
	fs.IntVar(&l.MaxHeaderBytes, "max-header-bytes", l.MaxHeaderBytes, "largest request headers accepted")
	fs.IntVar(&l.MaxInFlight, "max-requests-inflight", l.MaxInFlight, "requests served at once, streams excepted; more are answered 429; 0: no cap")
	fs.IntVar(&l.MaxStreams, "max-streams", l.MaxStreams, "console, VNC and port-forward streams open at once; more are answered 429; 0: no cap")
	fs.DurationVar(&l.RetryAfter, "retry-after", l.RetryAfter, "the Retry-After of a 429 answer")
	fs.DurationVar(&l.StreamWriteTimeout, "stream-write-timeout", l.StreamWriteTimeout, "how long one write of a stream may block before the stream is closed; 0: no bound")
}

// Server returns an http.Server serving h within l. The zero Limits serve h as it is.
func (l Limits) Server(h http.Handler) *http.Server {
	if l != (Limits{}) {
		h = l.Handler(h)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		// ReadTimeout and WriteTimeout stay unset: they would end streams too. Handler sets
		// them per request instead.
	}
}

// Handler applies the per-request limits to h: the concurrency caps and, for requests that
// are not streams, the read and write deadlines and the context deadline.
func (l Limits) Handler(h http.Handler) http.Handler {
	reqs, streams := newSemaphore(l.MaxInFlight), newSemaphore(l.MaxStreams)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if IsStream(r) {
			if !streams.acquire() {
				TooManyRequests(w, l.RetryAfter, "too many streams are open, please try again later")
				return
			}
			defer streams.release()
			// No deadline: net/http clears those of an earlier request on the connection
			// once that request is answered.
			h.ServeHTTP(w, r)
			return
		}
		if !reqs.acquire() {
			TooManyRequests(w, l.RetryAfter, "too many requests, please try again later")
			return
		}
		defer reqs.release()
		now := time.Now()
		if l.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(now.Add(l.WriteTimeout + l.grace()))
			ctx, cancel := context.WithTimeout(r.Context(), l.WriteTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if l.ReadTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
			// Only requests with a body: without one, net/http is already reading ahead on
			// the connection to notice a client that goes away, and a deadline there would end
			// the request. It clears this deadline itself once the body has been read.
			_ = rc.SetReadDeadline(now.Add(l.ReadTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// IsStream reports whether r asks for a long-lived stream (a websocket upgrade).
func IsStream(r *http.Request) bool { return websocket.IsWebSocketUpgrade(r) }

// MaxBody caps the bodies h reads at n bytes: a request announcing more is answered 413 at
// once, and reading past n fails with *http.MaxBytesError, which h answers 413 (TooLarge).
func MaxBody(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			TooLarge(w, n)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		h.ServeHTTP(w, r)
	})
}

// TooManyRequests answers 429 in Kubernetes' Status form with Retry-After.
func TooManyRequests(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	secs := int(math.Ceil(retryAfter.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeStatus(w, status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests", Message: msg, Details: &details{RetryAfterSeconds: secs}})
}

// TooLarge answers 413 in Kubernetes' Status form.
func TooLarge(w http.ResponseWriter, limit int64) {
	writeStatus(w, status{Code: http.StatusRequestEntityTooLarge, Reason: "RequestEntityTooLarge",
		Message: fmt.Sprintf("the request body is larger than %d bytes", limit)})
}

// status is metav1.Status as it goes on the wire; the node API's error answers read its
// reason and message too.
type status struct {
	Kind       string   `json:"kind"`
	APIVersion string   `json:"apiVersion"`
	Status     string   `json:"status"`
	Message    string   `json:"message"`
	Reason     string   `json:"reason"`
	Details    *details `json:"details,omitempty"`
	Code       int      `json:"code"`
}

type details struct {
	RetryAfterSeconds int `json:"retryAfterSeconds,omitempty"`
}

func writeStatus(w http.ResponseWriter, s status) {
	s.Kind, s.APIVersion, s.Status = "Status", "v1", "Failure"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(s.Code)
	_ = json.NewEncoder(w).Encode(s)
}

// semaphore is a counting semaphore that never waits; nil has no cap.
type semaphore chan struct{}

func newSemaphore(n int) semaphore {
	if n <= 0 {
		return nil
	}
	return make(semaphore, n)
}

func (s semaphore) acquire() bool {
	if s == nil {
		return true
	}
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s semaphore) release() {
	if s != nil {
		<-s
	}
}
