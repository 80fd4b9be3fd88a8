package qmp

import (
	"context"
	"maps"
	"slices"

	"github.com/digitalocean/go-qemu/qmp/raw"
)

// Migrate starts migrating to uri (e.g. "unix:/path", "tcp:host:port",
// "exec:cmd") and returns at once; follow progress with QueryMigrate or the
// MIGRATION event (capability "events").
func (c *Client) Migrate(ctx context.Context, uri string) error {
	return c.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

// MigrateIncoming starts listening for an incoming migration on uri; QEMU
// must have been started with -incoming defer.
func (c *Client) MigrateIncoming(ctx context.Context, uri string) error {
	return c.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// MigrateSetCapabilities turns migration capabilities on or off, e.g.
// {"events": true, "auto-converge": true}.
func (c *Client) MigrateSetCapabilities(ctx context.Context, caps map[string]bool) error {
	type capability struct {
		Capability string `json:"capability"`
		State      bool   `json:"state"`
	}
	list := make([]capability, 0, len(caps))
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		list = append(list, capability{name, caps[name]})
	}
	return c.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": list}, nil)
}

// MigrateSetParameters sets migration parameters, e.g.
// {"max-bandwidth": 1 << 30, "downtime-limit": 300}.
func (c *Client) MigrateSetParameters(ctx context.Context, params map[string]any) error {
	return c.Execute(ctx, "migrate-set-parameters", params, nil)
}

// MigrateCancel cancels the outgoing migration.
func (c *Client) MigrateCancel(ctx context.Context) error {
	return c.Execute(ctx, "migrate_cancel", nil, nil)
}

// Migration states reported by query-migrate and the MIGRATION event.
const (
	MigrationNone           = "none"
	MigrationSetup          = "setup"
	MigrationCancelling     = "cancelling"
	MigrationCancelled      = "cancelled"
	MigrationActive         = "active"
	MigrationPostcopyActive = "postcopy-active"
	MigrationCompleted      = "completed"
	MigrationFailed         = "failed"
	MigrationPreSwitchover  = "pre-switchover"
	MigrationDevice         = "device"
	MigrationWaitUnplug     = "wait-unplug"
)

// MigrationInfo is the reply of query-migrate. Status is empty before any
// migration was started; times are in milliseconds.
type MigrationInfo struct {
	Status                string          `json:"status,omitempty"`
	RAM                   *MigrationStats `json:"ram,omitempty"`
	TotalTime             *int64          `json:"total-time,omitempty"`
	ExpectedDowntime      *int64          `json:"expected-downtime,omitempty"`
	Downtime              *int64          `json:"downtime,omitempty"`
	SetupTime             *int64          `json:"setup-time,omitempty"`
	CPUThrottlePercentage *int64          `json:"cpu-throttle-percentage,omitempty"`
	ErrorDesc             string          `json:"error-desc,omitempty"`
}

// MigrationStats are the RAM counters of a migration: Transferred,
// Remaining and Total bytes, DirtyPagesRate (pages/s), Mbps and more.
type MigrationStats = raw.MigrationStats

// QueryMigrate runs query-migrate.
func (c *Client) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var m MigrationInfo
	err := c.Execute(ctx, "query-migrate", nil, &m)
	return m, err
}

// MigrateStartPostcopy switches a running migration to post-copy: the target runs the guest
// and pulls the pages it still lacks. Both sides need the postcopy-ram capability.
func (c *Client) MigrateStartPostcopy(ctx context.Context) error {
	return c.Execute(ctx, "migrate-start-postcopy", nil, nil)
}
