package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// ErrDumpInProgress is returned by DumpMemory while a dump runs.
var ErrDumpInProgress = errors.New("vm: a memory dump is in progress")

// dumpPoll is how often a dump's progress is read.
const dumpPoll = 200 * time.Millisecond

// DumpMemory starts writing the guest's memory as an ELF core into f and returns once QEMU has
// begun; the progress shows in Status().MemoryDump. QEMU stops a running guest while it
// dumps, and resumes it when the dump ends: the VM stays running throughout, as far as its
// state goes. f is closed (QEMU keeps its own copy until the dump ends).
func (v *VM) DumpMemory(ctx context.Context, id string, f *os.File) error {
	defer f.Close()
	mon, err := v.live()
	if err != nil {
		return err
	}
	v.mu.Lock()
	switch st := v.status.State; {
	case st != launcherapi.State_STATE_RUNNING && st != launcherapi.State_STATE_PAUSED:
		v.mu.Unlock()
		return fmt.Errorf("%w: the VM is %s", ErrNotRunning, st)
	case migrating(v.status.Migration):
		v.mu.Unlock()
		return ErrMigrating
	case v.dumping:
		v.mu.Unlock()
		return ErrDumpInProgress
	}
	// Set before QEMU stops the guest, so its STOP is known as the dump's (followEvents).
	v.dumping = true
	v.dumpSeq++
	// Each dump's descriptor has a name of its own, so closing one dump's never hits the next's.
	fdName := fmt.Sprintf("memory-dump-%d", v.dumpSeq)
	v.status.MemoryDump = &launcherapi.MemoryDumpStatus{Id: id, State: qmp.DumpActive, StartUnixNano: time.Now().UnixNano()}
	v.publishLocked("")
	v.mu.Unlock()
	log := v.log.WithValues("dump", id)

	if err := mon.GetFD(ctx, fdName, f); err != nil {
		v.endDump(qmp.DumpInfo{Status: qmp.DumpFailed}, err.Error())
		return fmt.Errorf("memory dump: %w", err)
	}
	if err := mon.DumpGuestMemory(ctx, "fd:"+fdName, qmp.DumpELF); err != nil {
		v.closeDumpFD(mon, fdName)
		v.endDump(qmp.DumpInfo{Status: qmp.DumpFailed}, err.Error())
		return fmt.Errorf("memory dump: %w", err)
	}
	log.Info("memory dump started")
	go v.followDump(mon, fdName)
	return nil
}

// followDump reads the dump's progress until it ends. The end is normally recorded from
// QEMU's DUMP_COMPLETED (in the order of the STOP and RESUME around it); should the event be
// lost, query-dump's answer ends it.
func (v *VM) followDump(mon *qmp.Client, fdName string) {
	defer v.closeDumpFD(mon, fdName)
	var ended time.Time
	for {
		select {
		case <-v.exited:
			v.endDump(qmp.DumpInfo{Status: qmp.DumpFailed}, "qemu exited during the dump")
			return
		case <-time.After(dumpPoll):
		}
		v.mu.Lock()
		dumping := v.dumping
		v.mu.Unlock()
		if !dumping {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		d, err := mon.QueryDump(ctx)
		cancel()
		if err != nil {
			v.log.V(1).Info("reading the dump's progress", "error", err.Error())
			continue
		}
		if d.Status == qmp.DumpActive {
			v.dumpProgress(d)
			continue
		}
		if ended.IsZero() {
			ended = time.Now()
		} else if time.Since(ended) > 2*time.Second {
			v.endDump(d, "")
			return
		}
	}
}

func (v *VM) dumpProgress(d qmp.DumpInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m := v.status.MemoryDump; v.dumping && m != nil {
		m.WrittenBytes, m.TotalBytes = uint64(max(d.Completed, 0)), uint64(max(d.Total, 0))
	}
}

// dumpCompleted records the end QEMU reports in DUMP_COMPLETED.
func (v *VM) dumpCompleted(ev qmp.Event) {
	if d, msg, ok := qmp.DumpCompletedResult(ev); ok {
		v.endDump(d, msg)
	}
}

// endDump records how the dump ended, once.
func (v *VM) endDump(d qmp.DumpInfo, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.status.MemoryDump
	if !v.dumping || m == nil {
		return
	}
	v.dumping = false
	m.State = d.Status
	if m.State != qmp.DumpCompleted {
		m.State = qmp.DumpFailed
	}
	m.EndUnixNano = time.Now().UnixNano()
	if d.Total > 0 {
		m.WrittenBytes, m.TotalBytes = uint64(max(d.Completed, 0)), uint64(d.Total)
	}
	m.Message = msg
	took := time.Duration(m.EndUnixNano - m.StartUnixNano)
	if m.State == qmp.DumpCompleted {
		v.log.Info("memory dump completed", "dump", m.Id, "bytes", m.WrittenBytes, "took", took)
	} else {
		v.log.Info("memory dump failed", "dump", m.Id, "message", msg, "took", took)
	}
	v.publishLocked("DUMP_COMPLETED")
}

// closeDumpFD closes QEMU's copy of the descriptor if QEMU still has it by name; the dump
// itself closes it once it took it over, so a missing name is the usual answer.
func (v *VM) closeDumpFD(mon *qmp.Client, fdName string) {
	ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
	defer cancel()
	if err := mon.CloseFD(ctx, fdName); err == nil {
		v.log.V(1).Info("closed the dump's descriptor QEMU still held")
	}
}
