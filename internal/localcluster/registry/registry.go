// Package registry runs the OCI distribution registry (built by `make nodes` into
// _tools/node/registry) as a child process: the plain-HTTP registry a local cluster's nodes pull
// the qvirt images from, optionally behind htpasswd basic auth.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/qvirt/qvirt/internal/proc"
)

// Options say how to run the registry.
type Options struct {
	// Binary is the distribution registry binary.
	Binary string
	// Addr is the host:port the registry listens on, e.g. 10.233.0.1:5000 or 127.0.0.1:5000.
	Addr string
	// Dir is the storage root; config.yml and htpasswd are written into it too.
	Dir string
	// LogPath receives the registry's output; Dir/registry.log when empty.
	LogPath string
	// Htpasswd, when not empty, makes every request need basic auth as one of these users
	// (name -> password).
	Htpasswd map[string]string
	// Spawner starts the process; Start makes one of its own when nil.
	Spawner *proc.Spawner
	// Ready bounds the wait for the registry to answer; 30s when zero.
	Ready time.Duration
	Log   logr.Logger
}

// Registry is a running registry.
type Registry struct {
	// Addr is where it listens, as given in Options.
	Addr string
	// Dir is its storage root.
	Dir string

	process      *proc.Process
	ownSpawner   *proc.Spawner
	log          logr.Logger
	stopOnce     sync.Once
	stopErr      error
	authRequired bool
}

// Start writes the config, starts the registry and returns once GET /v2/ answers (200, or 401
// when auth is on).
func Start(ctx context.Context, o Options) (*Registry, error) {
	if o.Binary == "" || o.Addr == "" || o.Dir == "" {
		return nil, errors.New("registry: Binary, Addr and Dir are required")
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("registry binary (make nodes): %w", err)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("registry address %q: %w", o.Addr, err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if o.LogPath == "" {
		o.LogPath = filepath.Join(o.Dir, "registry.log")
	}
	if o.Ready == 0 {
		o.Ready = 30 * time.Second
	}
	config, err := writeConfig(o)
	if err != nil {
		return nil, fmt.Errorf("registry config: %w", err)
	}
	r := &Registry{Addr: o.Addr, Dir: o.Dir, log: o.Log.WithValues("registry", o.Addr), authRequired: len(o.Htpasswd) > 0}
	spawner := o.Spawner
	if spawner == nil {
		spawner = proc.NewSpawner()
		r.ownSpawner = spawner
	}
	// The registry always sets up OpenTelemetry, whose default exporter posts traces to
	// localhost:4318 and logs each failure; env(1) turns it off, as StartProcess passes on this
	// process's environment unchanged.
	env, err := exec.LookPath("env")
	if err != nil {
		r.stopSpawner()
		return nil, err
	}
	args := []string{"OTEL_TRACES_EXPORTER=none", o.Binary, "serve", config}
	if r.process, err = proc.StartProcess(spawner, "registry", env, o.LogPath, args); err != nil {
		r.stopSpawner()
		return nil, err
	}
	r.log.Info("registry starting", "dir", o.Dir, "log", o.LogPath, "auth", r.authRequired, "pid", r.process.Pid())
	if err := r.waitReady(ctx, o.Ready); err != nil {
		r.Stop()
		return nil, err
	}
	r.log.Info("registry ready")
	return r, nil
}

// Process is the registry's process, e.g. to notice that it exited.
func (r *Registry) Process() *proc.Process { return r.process }

// Stop ends the registry; the storage stays.
func (r *Registry) Stop() error {
	r.stopOnce.Do(func() {
		r.stopErr = r.process.Stop(10 * time.Second)
		r.stopSpawner()
		r.log.Info("registry stopped")
	})
	return r.stopErr
}

func (r *Registry) stopSpawner() {
	if r.ownSpawner != nil {
		r.ownSpawner.Stop()
	}
}

// pingURL is /v2/ at an address this machine can reach: a wildcard listener is asked on loopback.
func (r *Registry) pingURL() string {
	host, port, _ := net.SplitHostPort(r.Addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/v2/"
}

func (r *Registry) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	url := r.pingURL()
	want := http.StatusOK
	if r.authRequired {
		want = http.StatusUnauthorized
	}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = fmt.Errorf("GET %s: %s", url, resp.Status)
		} else {
			last = err
		}
		select {
		case <-r.process.Exited():
			return r.process.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("registry at %s not ready: %v (last: %v); log %s:\n%s", r.Addr, ctx.Err(), last,
				r.process.LogPath, proc.Tail(r.process.LogPath, 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
