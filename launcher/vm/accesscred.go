package vm

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/qvirt/qvirt/launcher/accesscred"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/guestagent"
)

// credentialResync applies unchanged credentials again, as KubeVirt does, so that a guest that
// lost them (a user edited authorized_keys, the guest rebooted from a snapshot) gets them back.
const credentialResync = 5 * time.Minute

// credentialSync remembers what the guest agent last applied without an error.
type credentialSync struct {
	applied *accesscred.Desired
	at      time.Time
	last    *launcherapi.AccessCredentialsStatus
}

// syncCredentials applies the guest agent's access credentials through c (nil while the agent
// does not answer) when they differ from what it applied last, after a failure, and every
// credentialResync. The secret files are read each time: the kubelet updates them in place when
// the secret changes.
func (v *VM) syncCredentials(c *guestagent.Client, spec []*launcherapi.AccessCredential, s *credentialSync) *launcherapi.AccessCredentialsStatus {
	if c == nil {
		s.applied = nil
		return &launcherapi.AccessCredentialsStatus{Message: "Guest agent is offline"}
	}
	want, err := accesscred.ReadDesired(spec)
	if err != nil {
		s.applied = nil
		return &launcherapi.AccessCredentialsStatus{Message: err.Error()}
	}
	if s.applied != nil && reflect.DeepEqual(*s.applied, want) && time.Since(s.at) < credentialResync {
		return s.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := &launcherapi.AccessCredentialsStatus{Succeeded: true}
	fail := func(msg string) {
		if st.Succeeded {
			st.Succeeded, st.Message = false, msg
		}
	}
	for _, user := range slices.Sorted(maps.Keys(want.AuthorizedKeys)) {
		if err := c.SetAuthorizedKeys(ctx, user, want.AuthorizedKeys[user]); err != nil {
			fail(fmt.Sprintf("Error encountered writing ssh pub key access credentials for user [%s]: %v", user, err))
		}
	}
	for _, user := range slices.Sorted(maps.Keys(want.Passwords)) {
		if err := c.SetUserPassword(ctx, user, want.Passwords[user]); err != nil {
			fail(fmt.Sprintf("Error encountered setting password for user [%s]: %v", user, err))
		}
	}
	switch {
	case st.Succeeded:
		s.applied, s.at = &want, time.Now()
		v.log.Info("access credentials applied through the guest agent", "users", len(want.AuthorizedKeys), "passwords", len(want.Passwords))
	case !proto.Equal(st, s.last):
		// Retried at every poll; said once per reason.
		s.applied = nil
		v.log.Info("access credentials not applied", "reason", st.Message)
	default:
		s.applied = nil
	}
	s.last = st
	return st
}
