package qmp

import (
	"context"
	"encoding/json"
)

// Dump states reported by query-dump and DUMP_COMPLETED (QEMU's DumpStatus).
const (
	DumpNone      = "none"
	DumpActive    = "active"
	DumpCompleted = "completed"
	DumpFailed    = "failed"
)

// Dump formats (QEMU's DumpGuestMemoryFormat); DumpELF is QEMU's default.
const (
	DumpELF     = "elf"
	DumpKdump   = "kdump-zlib"
	DumpWindows = "win-dmp"
)

// DumpInfo is the reply of query-dump and the result of DUMP_COMPLETED.
// Status is kept as a string (see the Dump* constants).
type DumpInfo struct {
	Status    string `json:"status"`
	Completed int64  `json:"completed"`
	Total     int64  `json:"total"`
}

// DumpGuestMemory starts writing the guest's memory to protocol ("fd:<name>"
// for a descriptor passed with GetFD, which QEMU then owns and closes) in
// format (empty: ELF) and returns at once (detach): follow it with QueryDump
// or the DUMP_COMPLETED event. It dumps the memory as it is, without walking
// the guest's page tables (paging off). QEMU stops a running guest for the
// dump and resumes it when it ends, with STOP and RESUME events.
func (c *Client) DumpGuestMemory(ctx context.Context, protocol, format string) error {
	args := map[string]any{"paging": false, "protocol": protocol, "detach": true}
	if format != "" {
		args["format"] = format
	}
	return c.Execute(ctx, "dump-guest-memory", args, nil)
}

// QueryDump reports the progress of the last dump; Status is DumpNone
// before any.
func (c *Client) QueryDump(ctx context.Context) (DumpInfo, error) {
	var d DumpInfo
	err := c.Execute(ctx, "query-dump", nil, &d)
	return d, err
}

// DumpCompletedResult decodes a DUMP_COMPLETED event: how the dump ended,
// and QEMU's error message if it failed. ok is false for another event.
func DumpCompletedResult(e Event) (info DumpInfo, errMsg string, ok bool) {
	if e.Name != "DUMP_COMPLETED" {
		return DumpInfo{}, "", false
	}
	// Data came from JSON; a round trip decodes it as query-dump's reply.
	if b, err := json.Marshal(e.Data["result"]); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	errMsg, _ = e.Data["error"].(string)
	return info, errMsg, true
}
