package metrics

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadNetDev reads the counters of the named interfaces from /proc/<pid>/net/dev, which shows
// the network namespace of that process: the launcher's, where the VM's taps live. No
// namespace switch is needed.
func ReadNetDev(pid int, names ...string) (map[string]NetStats, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]NetStats{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		name = strings.TrimSpace(name)
		if !ok || !want[name] {
			continue
		}
		// rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop ...
		f := strings.Fields(rest)
		if len(f) < 12 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out[name] = NetStats{RxBytes: n(0), RxPackets: n(1), RxErrors: n(2), RxDropped: n(3),
			TxBytes: n(8), TxPackets: n(9), TxErrors: n(10), TxDropped: n(11)}
	}
	return out, sc.Err()
}
