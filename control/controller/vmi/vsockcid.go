package vmi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// firstCID is the lowest context ID a guest can have: 0 and 1 are reserved, 2 is the host.
const firstCID = 3

// maxCID bounds the search; far more than a cluster runs.
const maxCID = 1 << 24

// CIDs hands out VSOCK context IDs unique among the cluster's VMIs, as KubeVirt's
// virt-controller does: the lowest one no VMI holds. It remembers what it handed out until the
// VMI's status shows it, so that two reconciles at once never get the same one from a cache
// that has not seen either write yet. The zero value is ready.
type CIDs struct {
	mu      sync.Mutex
	pending map[types.UID]uint32
}

// ErrNoCID is returned when every context ID is taken.
var ErrNoCID = errors.New("no free VSOCK context ID")

// Allocate returns a free context ID for vmi, the same one for the same VMI until it is
// recorded.
func (a *CIDs) Allocate(ctx context.Context, reader client.Reader, vmi *virtv1.VirtualMachineInstance) (uint32, error) {
	var all virtv1.VirtualMachineInstanceList
	if err := reader.List(ctx, &all); err != nil {
		return 0, fmt.Errorf("listing VMIs for a VSOCK context ID: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[types.UID]uint32{}
	}
	used := map[uint32]bool{}
	listed := map[types.UID]bool{}
	for i := range all.Items {
		v := &all.Items[i]
		listed[v.UID] = true
		if c := v.Status.VSOCKCID; c != nil {
			used[*c] = true
			delete(a.pending, v.UID) // recorded: the status holds it now
		}
	}
	for uid, c := range a.pending {
		if !listed[uid] { // the VMI is gone
			delete(a.pending, uid)
			continue
		}
		if uid != vmi.UID {
			used[c] = true
		}
	}
	if c, ok := a.pending[vmi.UID]; ok {
		return c, nil
	}
	for c := uint32(firstCID); c < maxCID; c++ {
		if !used[c] {
			a.pending[vmi.UID] = c
			return c, nil
		}
	}
	return 0, ErrNoCID
}
