package vm

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/qvirt/qvirt/launcher/accesscred"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/guestagent"
)

// guestAgentPoll is how often the launcher asks the guest agent what it knows; a change of
// what it answers (or of whether it answers) is an event, so the node agent reports it at once.
const guestAgentPoll = 5 * time.Second

// agentEvent is the qmp_event of an Event that reports the guest agent's information changed.
const agentEvent = "GUEST_AGENT"

// followGuestAgent keeps status.guest_agent current until QEMU exits.
func (v *VM) followGuestAgent() {
	var c *guestagent.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	v.mu.Lock()
	credSpec := v.spec.GetAccessCredentials()
	v.mu.Unlock()
	withCreds := accesscred.ThroughGuestAgent(credSpec)
	var creds credentialSync
	for {
		info := v.askGuestAgent(&c)
		var cs *launcherapi.AccessCredentialsStatus
		if withCreds {
			cs = v.syncCredentials(c, credSpec, &creds)
		}
		v.mu.Lock()
		changed := false
		if !proto.Equal(info, v.status.GuestAgent) {
			if info.Connected != v.status.GetGuestAgent().GetConnected() {
				v.log.Info("guest agent", "connected", info.Connected, "version", info.Version)
			}
			v.status.GuestAgent = info
			changed = true
		}
		if cs != nil && !proto.Equal(cs, v.status.AccessCredentials) {
			v.status.AccessCredentials = cs
			changed = true
		}
		if changed {
			v.publishLocked(agentEvent)
		}
		v.mu.Unlock()
		select {
		case <-v.exited:
			return
		case <-time.After(guestAgentPoll):
		}
	}
}

// askGuestAgent asks the agent over *c, connecting first when needed; an agent that does not
// answer in time reports as disconnected, and its session is dropped.
func (v *VM) askGuestAgent(c **guestagent.Client) *launcherapi.GuestAgentInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if *c == nil {
		cl, err := guestagent.Dial(ctx, v.layout.GuestAgentSocket())
		if err != nil {
			v.log.V(1).Info("guest agent not answering", "err", err.Error())
			return &launcherapi.GuestAgentInfo{}
		}
		*c = cl
	}
	info, err := (*c).Info(ctx)
	if err != nil {
		v.log.V(1).Info("guest agent stopped answering", "err", err.Error())
		(*c).Close()
		*c = nil
		return &launcherapi.GuestAgentInfo{}
	}
	return info
}
