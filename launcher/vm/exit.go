package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

func (v *VM) qemuLogPath() string { return filepath.Join(v.layout.Dir, "qemu.log") }

// followEvents turns QMP events into state changes. It ends when the QMP connection closes.
func (v *VM) followEvents(events <-chan qmp.Event) {
	defer close(v.eventsDone)
	for ev := range events {
		switch ev.Name {
		case "SHUTDOWN":
			v.guestShutdown(ev)
		case "STOP":
			// QEMU also stops the vCPUs when the guest powers off (-no-shutdown) and when an
			// outgoing migration enters its last stage or post-copy: neither is a pause.
			// A memory dump stops the guest too, and resumes it when done.
			v.mu.Lock()
			off, dumping := v.poweredOff, v.dumping
			m := v.status.Migration
			moving := m != nil && m.Outgoing && migrating(m)
			v.mu.Unlock()
			if !off && !moving && !dumping {
				v.transition(launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED, ev.Name)
			}
		case "RESUME":
			v.mu.Lock()
			v.poweredOff = false
			v.mu.Unlock()
			v.transition(launcherapi.State_STATE_PAUSED, launcherapi.State_STATE_RUNNING, ev.Name)
		case "MIGRATION":
			if s, ok := ev.Data["status"].(string); ok {
				v.incomingMigration(s)
			}
		case "DUMP_COMPLETED":
			v.dumpCompleted(ev)
		case "DEVICE_DELETED":
			if id, ok := ev.Data["device"].(string); ok {
				v.hotplugDeviceDeleted(id)
			}
		case "RESET", "POWERDOWN", "GUEST_PANICKED":
			v.mu.Lock()
			v.publishLocked(ev.Name)
			v.mu.Unlock()
		}
	}
}

// guestShutdown handles QEMU's SHUTDOWN event. QEMU runs with -no-shutdown, so after a guest
// power-off it waits: a pending soft reboot resets and resumes the guest, anything else makes
// the launcher quit QEMU, whose exit is then reported with the first shutdown's reason.
func (v *VM) guestShutdown(ev qmp.Event) {
	v.mu.Lock()
	reboot := v.rebootPending
	v.rebootPending = false
	v.poweredOff = true
	if !reboot && v.lastShutd == nil {
		e := ev
		v.lastShutd = &e
	}
	v.mu.Unlock()
	mon, err := v.live()
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		defer cancel()
		if reboot {
			v.log.Info("guest powered off for a soft reboot; starting it again")
			if err := mon.SystemReset(ctx); err == nil {
				err = mon.Cont(ctx)
			}
			if err == nil {
				v.mu.Lock()
				v.publishLocked("SOFT_REBOOT")
				v.mu.Unlock()
				return
			}
			v.log.Error(err, "soft reboot")
		}
		_ = mon.Quit(ctx)
	}()
}

// transition moves from one state to another only if the VM is still in the first.
func (v *VM) transition(from, to launcherapi.State, qmpEvent string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.status.State != from {
		return
	}
	v.status.State = to
	v.publishLocked(qmpEvent)
}

// watch waits for QEMU to exit and records why.
func (v *VM) watch(cmd *exec.Cmd) {
	err := cmd.Wait()
	// QEMU writes its SHUTDOWN event before exiting; let the reader drain the socket so the
	// reason is known, but never hold up the report of a crash for long.
	select {
	case <-v.eventsDone:
	case <-time.After(500 * time.Millisecond):
	}
	v.mu.Lock()
	intent, shut, mon, killMsg, sl := v.stopping, v.lastShutd, v.mon, v.killMsg, v.serialLog
	failedStart := v.status.ExitReason == launcherapi.ExitReason_EXIT_REASON_FAILED_START
	startErr := v.status.Message
	v.mu.Unlock()
	if mon != nil {
		_ = mon.Close()
	}
	if sl != nil {
		// The guest's last words are in the log before the exit is reported.
		select {
		case <-sl.done:
		case <-time.After(time.Second):
		}
	}
	state, reason, msg := exitReason(intent, shut, err, lastLine(v.qemuLogPath()))
	switch {
	case failedStart:
		state, reason, msg = launcherapi.State_STATE_CRASHED, launcherapi.ExitReason_EXIT_REASON_FAILED_START, startErr
	case intent == intentKill && killMsg != "":
		msg = killMsg
	}
	v.log.Info("qemu exited", "reason", reason.String(), "message", msg)
	v.finish(state, reason, msg)
}

// exitReason classifies QEMU's exit from who asked it to stop, the last SHUTDOWN event and
// the process status.
func exitReason(intent stopIntent, shut *qmp.Event, waitErr error, logTail string) (launcherapi.State, launcherapi.ExitReason, string) {
	stopped, crashed := launcherapi.State_STATE_STOPPED, launcherapi.State_STATE_CRASHED
	if intent == intentKill {
		return stopped, launcherapi.ExitReason_EXIT_REASON_KILLED, "qemu killed by the launcher"
	}
	if intent == intentMigrated {
		return stopped, launcherapi.ExitReason_EXIT_REASON_MIGRATED, "the guest migrated to its target"
	}
	if shut != nil {
		guest, _ := shut.Data["guest"].(bool)
		why, _ := shut.Data["reason"].(string)
		switch {
		case why == "guest-panic":
			return crashed, launcherapi.ExitReason_EXIT_REASON_CRASHED, "guest panicked"
		case intent == intentShutdown:
			return stopped, launcherapi.ExitReason_EXIT_REASON_SHUTDOWN, "shut down on request (" + why + ")"
		case guest:
			return stopped, launcherapi.ExitReason_EXIT_REASON_GUEST_SHUTDOWN, "guest powered off (" + why + ")"
		default:
			return stopped, launcherapi.ExitReason_EXIT_REASON_SHUTDOWN, "qemu stopped by the host (" + why + ")"
		}
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return crashed, launcherapi.ExitReason_EXIT_REASON_CRASHED, fmt.Sprintf("qemu killed by signal %s", ws.Signal())
		}
		msg := fmt.Sprintf("qemu exited with status %d", ee.ExitCode())
		if logTail != "" {
			msg += ": " + logTail
		}
		return crashed, launcherapi.ExitReason_EXIT_REASON_CRASHED, msg
	}
	if waitErr != nil {
		return crashed, launcherapi.ExitReason_EXIT_REASON_CRASHED, waitErr.Error()
	}
	return crashed, launcherapi.ExitReason_EXIT_REASON_CRASHED, "qemu exited without a shutdown event"
}

// finish records the final state once and wakes everyone waiting for the exit.
func (v *VM) finish(state launcherapi.State, reason launcherapi.ExitReason, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.exited:
		return
	default:
	}
	v.status.State = state
	v.status.ExitReason = reason
	v.status.Message = msg
	v.status.QmpStatus = ""
	// Nothing is attached to a QEMU that is gone.
	v.status.HotpluggedDisks = nil
	v.publishLocked("")
	for ch := range v.subs {
		close(ch)
	}
	v.subs = map[chan *launcherapi.Event]struct{}{}
	close(v.exited)
}

// lastLine returns the last non-empty line of QEMU's log: on an error exit it says why.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}
