package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/digitalocean/go-qemu/qmp/raw"
)

// CPU is one entry of query-cpus-fast.
type CPU struct {
	CPUIndex int    `json:"cpu-index"`
	QOMPath  string `json:"qom-path"`
	// ThreadID is the host thread running this vCPU.
	ThreadID int      `json:"thread-id"`
	Target   string   `json:"target"`
	Props    CPUProps `json:"props"`
}

// CPUProps places a vCPU in the topology; absent members are nil.
type CPUProps struct {
	NodeID    *int64 `json:"node-id,omitempty"`
	SocketID  *int64 `json:"socket-id,omitempty"`
	DieID     *int64 `json:"die-id,omitempty"`
	ClusterID *int64 `json:"cluster-id,omitempty"`
	CoreID    *int64 `json:"core-id,omitempty"`
	ThreadID  *int64 `json:"thread-id,omitempty"`
}

// QueryCPUsFast runs query-cpus-fast, which does not interrupt the vCPUs.
func (c *Client) QueryCPUsFast(ctx context.Context) ([]CPU, error) {
	var cpus []CPU
	err := c.Execute(ctx, "query-cpus-fast", nil, &cpus)
	return cpus, err
}

// query-stats targets and providers known to QEMU 7.2.
const (
	StatsTargetVM    = "vm"
	StatsTargetVCPU  = "vcpu"
	StatsProviderKVM = "kvm"
)

// StatsProvider selects a provider for QueryStats and, optionally, some of
// its statistics by name (all when Names is empty).
type StatsProvider struct {
	Provider string   `json:"provider"`
	Names    []string `json:"names,omitempty"`
}

// StatsResult is the statistics of one provider for one object: the VM, or
// the vCPU at QOMPath.
type StatsResult struct {
	Provider string `json:"provider"`
	QOMPath  string `json:"qom-path,omitempty"`
	Stats    []Stat `json:"stats"`
}

// Stat is one named statistic.
type Stat struct {
	Name  string    `json:"name"`
	Value StatValue `json:"value"`
}

// Kinds of StatValue.
const (
	StatScalar  = "scalar"
	StatBoolean = "boolean"
	StatList    = "list"
)

// StatValue is QEMU's StatsValue: a counter, a flag or a histogram. Kind says
// which member is set.
type StatValue struct {
	Kind   string
	Scalar uint64
	Bool   bool
	List   []uint64
}

func (v *StatValue) UnmarshalJSON(b []byte) error {
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	switch x.(type) {
	case bool:
		v.Kind = StatBoolean
		return json.Unmarshal(b, &v.Bool)
	case []any:
		v.Kind = StatList
		return json.Unmarshal(b, &v.List)
	case float64:
		v.Kind = StatScalar
		return json.Unmarshal(b, &v.Scalar)
	default:
		return fmt.Errorf("unexpected stats value %s", b)
	}
}

// QueryStats runs query-stats for target (StatsTargetVM or StatsTargetVCPU),
// from the given providers or from all of them. Only KVM provides statistics
// in QEMU 7.2, so under TCG the result is empty, not an error. QEMU older
// than 7.1 answers with an *Error of class ClassCommandNotFound.
func (c *Client) QueryStats(ctx context.Context, target string, providers ...StatsProvider) ([]StatsResult, error) {
	args := struct {
		Target    string          `json:"target"`
		Providers []StatsProvider `json:"providers,omitempty"`
	}{target, providers}
	res := []StatsResult{}
	err := c.Execute(ctx, "query-stats", args, &res)
	return res, err
}

// BlockStats is one entry of query-blockstats.
type BlockStats struct {
	Device   string           `json:"device,omitempty"`
	QDev     string           `json:"qdev,omitempty"`
	NodeName string           `json:"node-name,omitempty"`
	Stats    BlockDeviceStats `json:"stats"`
	Parent   *BlockStats      `json:"parent,omitempty"`
	Backing  *BlockStats      `json:"backing,omitempty"`
}

// BlockDeviceStats holds the I/O counters of a block device: RdBytes,
// WrBytes, RdOperations, WrOperations, FlushOperations, RdTotalTimeNs,
// WrTotalTimeNs, FlushTotalTimeNs and more.
type BlockDeviceStats = raw.BlockDeviceStats

// QueryBlockStats runs query-blockstats for every block backend.
func (c *Client) QueryBlockStats(ctx context.Context) ([]BlockStats, error) {
	var stats []BlockStats
	err := c.Execute(ctx, "query-blockstats", nil, &stats)
	return stats, err
}

// QueryBalloon returns the guest's current memory size in bytes as seen by
// the balloon. Without a balloon device QEMU answers with an *Error of class
// ClassDeviceNotActive.
func (c *Client) QueryBalloon(ctx context.Context) (actual int64, err error) {
	var info raw.BalloonInfo
	err = c.Execute(ctx, "query-balloon", nil, &info)
	return info.Actual, err
}

// GuestStats are the memory statistics a virtio-balloon guest driver
// reports. A statistic the guest has not reported is nil; LastUpdate is zero
// until the guest reported once. Polling must be enabled first, see
// SetBalloonStatsPollingInterval.
type GuestStats struct {
	LastUpdate         time.Time
	SwapIn             *uint64
	SwapOut            *uint64
	MajorFaults        *uint64
	MinorFaults        *uint64
	FreeMemory         *uint64
	TotalMemory        *uint64
	AvailableMemory    *uint64
	DiskCaches         *uint64
	HugetlbAllocations *uint64
	HugetlbFailures    *uint64
}

func (g *GuestStats) UnmarshalJSON(b []byte) error {
	var r struct {
		LastUpdate int64             `json:"last-update"`
		Stats      map[string]uint64 `json:"stats"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*g = GuestStats{}
	if r.LastUpdate > 0 {
		g.LastUpdate = time.Unix(r.LastUpdate, 0)
	}
	for name, dst := range map[string]**uint64{
		"stat-swap-in":          &g.SwapIn,
		"stat-swap-out":         &g.SwapOut,
		"stat-major-faults":     &g.MajorFaults,
		"stat-minor-faults":     &g.MinorFaults,
		"stat-free-memory":      &g.FreeMemory,
		"stat-total-memory":     &g.TotalMemory,
		"stat-available-memory": &g.AvailableMemory,
		"stat-disk-caches":      &g.DiskCaches,
		"stat-htlb-pgalloc":     &g.HugetlbAllocations,
		"stat-htlb-pgfail":      &g.HugetlbFailures,
	} {
		// QEMU reports a missing statistic as -1 in a uint64.
		if v, ok := r.Stats[name]; ok && v != math.MaxUint64 {
			*dst = &v
		}
	}
	return nil
}

// BalloonGuestStats reads the guest-stats property of the virtio-balloon
// device at qomPath (for -device virtio-balloon-pci,id=balloon0 that is
// "/machine/peripheral/balloon0").
func (c *Client) BalloonGuestStats(ctx context.Context, qomPath string) (GuestStats, error) {
	var g GuestStats
	err := c.QOMGet(ctx, qomPath, "guest-stats", &g)
	return g, err
}

// SetBalloonStatsPollingInterval sets how often the balloon device asks the
// guest for statistics, in whole seconds; 0 stops polling.
func (c *Client) SetBalloonStatsPollingInterval(ctx context.Context, qomPath string, interval time.Duration) error {
	return c.QOMSet(ctx, qomPath, "guest-stats-polling-interval", int64(interval/time.Second))
}

// QOMGet reads a QOM property into out (qom-get).
func (c *Client) QOMGet(ctx context.Context, path, property string, out any) error {
	return c.Execute(ctx, "qom-get", map[string]any{"path": path, "property": property}, out)
}

// QOMSet writes a QOM property (qom-set).
func (c *Client) QOMSet(ctx context.Context, path, property string, value any) error {
	return c.Execute(ctx, "qom-set", map[string]any{"path": path, "property": property, "value": value}, nil)
}

// MemorySizeSummary is the reply of query-memory-size-summary: BaseMemory
// and, with memory hotplug, PluggedMemory, in bytes.
type MemorySizeSummary = raw.MemoryInfo

// QueryMemorySizeSummary runs query-memory-size-summary.
func (c *Client) QueryMemorySizeSummary(ctx context.Context) (MemorySizeSummary, error) {
	var m MemorySizeSummary
	err := c.Execute(ctx, "query-memory-size-summary", nil, &m)
	return m, err
}

// DirtyRate is query-dirty-rate's answer. RateMiBPerSecond is set once Status is
// DirtyRateMeasured.
type DirtyRate struct {
	Status           string `json:"status"`
	RateMiBPerSecond *int64 `json:"dirty-rate,omitempty"`
	StartTime        int64  `json:"start-time"`
	CalcTime         int64  `json:"calc-time"`
}

// query-dirty-rate statuses.
const (
	DirtyRateUnstarted = "unstarted"
	DirtyRateMeasuring = "measuring"
	DirtyRateMeasured  = "measured"
)

// CalcDirtyRate starts measuring how fast the guest dirties its memory, by sampling pages for
// the given number of seconds; QueryDirtyRate reads the result afterwards.
func (c *Client) CalcDirtyRate(ctx context.Context, seconds int64) error {
	return c.Execute(ctx, "calc-dirty-rate", map[string]any{"calc-time": seconds}, nil)
}

// QueryDirtyRate runs query-dirty-rate.
func (c *Client) QueryDirtyRate(ctx context.Context) (DirtyRate, error) {
	var d DirtyRate
	err := c.Execute(ctx, "query-dirty-rate", nil, &d)
	return d, err
}
