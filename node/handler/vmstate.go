package handler

import (
	"context"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/metrics"
)

type closer = io.Closer

// vmState is what the node agent knows of one VM between reconciles.
type vmState struct {
	key types.NamespacedName
	uid types.UID
	dir vmDir

	mu       sync.Mutex
	lc       *launcherConn
	nics     map[string]*PlumbedNIC
	last     *launcherapi.StatusResponse
	watching bool
	stopping bool
	// sessions holds the open console and VNC session per kind: one each per VMI.
	sessions map[string]closer
	// forwards counts the open port-forward connections.
	forwards int
	cancel   context.CancelFunc
	// mig is the migration this node carries for the VM, as its source or its target.
	mig *migrationLink

	// labels and stats feed the metrics collector; stats is refreshed by the stats poller.
	labels map[string]string
	stats  *launcherapi.StatsResponse
	net    map[string]metrics.NetStats
}

func (st *vmState) lastStatus() *launcherapi.StatusResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last
}

func (st *vmState) setStatus(s *launcherapi.StatusResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.last = s
}

func (st *vmState) launcher() *launcherConn {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lc
}

// connect returns the launcher connection, dialing the launcher when there is none yet.
func (st *vmState) connect() (*launcherConn, error) {
	if lc := st.launcher(); lc != nil {
		return lc, nil
	}
	lc, err := dialLauncher(st.dir)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	st.lc = lc
	st.mu.Unlock()
	return lc, nil
}

// close ends sessions and the event watch, and the launcher connection.
func (st *vmState) close() {
	st.mu.Lock()
	sessions := st.sessions
	st.sessions = map[string]closer{}
	mig := st.mig
	st.mig = nil
	st.mu.Unlock()
	if mig != nil {
		mig.close()
	}
	// Outside the lock: closing a session takes it.
	for _, s := range sessions {
		_ = s.Close()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancel != nil {
		st.cancel()
	}
	if st.lc != nil {
		st.lc.close()
		st.lc = nil
	}
}
