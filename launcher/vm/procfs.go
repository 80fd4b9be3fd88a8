package vm

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc on every architecture we run on.
const clockTicks = 100

// procStat holds the fields of /proc/<pid>[/task/<tid>]/stat that stats need.
type procStat struct {
	State       string
	MinorFaults uint64
	MajorFaults uint64
	UserNanos   uint64
	SystemNanos uint64
}

func readProcStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may contain spaces; fields after its closing ')' are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%s: malformed", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("%s: too few fields", path)
	}
	// f[0] is field 3 (state); minflt=10, majflt=12, utime=14, stime=15.
	n := func(field int) uint64 { v, _ := strconv.ParseUint(f[field-3], 10, 64); return v }
	const nsPerTick = 1e9 / clockTicks
	return procStat{
		State:       f[0],
		MinorFaults: n(10),
		MajorFaults: n(12),
		UserNanos:   n(14) * nsPerTick,
		SystemNanos: n(15) * nsPerTick,
	}, nil
}

// readSchedstat returns time on CPU and time waiting for a CPU, in ns, for one thread.
func readSchedstat(pid, tid int) (run, wait uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("schedstat of %d: malformed", tid)
	}
	run, _ = strconv.ParseUint(f[0], 10, 64)
	wait, _ = strconv.ParseUint(f[1], 10, 64)
	return run, wait, nil
}

// readRSS returns VmRSS of a process in bytes.
func readRSS(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
