package qmp

import "context"

// NBDServerStart serves NBD on a unix socket; exports are added with BlockExportAdd.
func (c *Client) NBDServerStart(ctx context.Context, socketPath string) error {
	// nbd-server-start takes the legacy socket address form, with the address under "data".
	return c.Execute(ctx, "nbd-server-start", map[string]any{
		"addr": map[string]any{"type": "unix", "data": map[string]any{"path": socketPath}}}, nil)
}

// NBDServerStop ends the NBD server and its exports.
func (c *Client) NBDServerStop(ctx context.Context) error {
	return c.Execute(ctx, "nbd-server-stop", nil, nil)
}

// BlockExportAdd exports the block node as an NBD export of the same name.
func (c *Client) BlockExportAdd(ctx context.Context, node string, writable bool) error {
	return c.Execute(ctx, "block-export-add", map[string]any{
		"type": "nbd", "id": "export-" + node, "node-name": node, "name": node, "writable": writable}, nil)
}

// BlockdevAddNBD opens an NBD export served on a unix socket as a block node.
func (c *Client) BlockdevAddNBD(ctx context.Context, node, socketPath, export string) error {
	return c.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "nbd", "node-name": node, "export": export,
		"server": map[string]any{"type": "unix", "path": socketPath}}, nil)
}

// BlockdevDel removes a block node added with blockdev-add.
func (c *Client) BlockdevDel(ctx context.Context, node string) error {
	return c.Execute(ctx, "blockdev-del", map[string]any{"node-name": node}, nil)
}

// BlockdevMirror starts job copying node's top layer (what is not in its backing image) to
// target, then mirroring every new write there until the job is cancelled or completed. Each
// guest write completes only once target has it too (copy-mode write-blocking), so once the
// job is ready the two stay in sync without a final catch-up.
func (c *Client) BlockdevMirror(ctx context.Context, job, node, target string) error {
	return c.Execute(ctx, "blockdev-mirror", map[string]any{
		"job-id": job, "device": node, "target": target, "sync": "top", "copy-mode": "write-blocking"}, nil)
}

// BlockJobCancel cancels a job; a mirror that is ready stops with its target in sync.
func (c *Client) BlockJobCancel(ctx context.Context, job string) error {
	return c.Execute(ctx, "block-job-cancel", map[string]any{"device": job}, nil)
}

// BlockJob is an entry of query-block-jobs.
type BlockJob struct {
	Device string `json:"device"`
	Type   string `json:"type"`
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Ready  bool   `json:"ready"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// QueryBlockJobs lists the running block jobs.
func (c *Client) QueryBlockJobs(ctx context.Context) ([]BlockJob, error) {
	var jobs []BlockJob
	err := c.Execute(ctx, "query-block-jobs", nil, &jobs)
	return jobs, err
}
