package qmp

import "context"

// BlockdevAdd adds a block node; args are blockdev-add's arguments, e.g.
// {"driver": "raw", "node-name": "fmt0", "file": "file0"}. Remove it with
// BlockdevDel.
func (c *Client) BlockdevAdd(ctx context.Context, args map[string]any) error {
	return c.Execute(ctx, "blockdev-add", args, nil)
}
