package netplumb

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
)

// Reverter collects one undo per completed step of a multi-step setup and runs them in
// reverse order when a later step fails, so a failed setup leaves the namespace as it was.
type Reverter struct {
	log   logr.Logger
	steps []undoStep
}

type undoStep struct {
	name string
	fn   func() error
}

// NewReverter returns an empty Reverter that logs each undo it runs.
func NewReverter(log logr.Logger) *Reverter { return &Reverter{log: log} }

// Add registers the undo of a step that has just succeeded.
func (r *Reverter) Add(step string, undo func() error) {
	r.steps = append(r.steps, undoStep{name: step, fn: undo})
}

// Revert runs every registered undo, newest first, and forgets them. It keeps going past a
// failed undo and returns all failures joined.
func (r *Reverter) Revert() error {
	var errs []error
	for i := len(r.steps) - 1; i >= 0; i-- {
		s := r.steps[i]
		r.log.V(1).Info("undo", "step", s.name)
		if err := s.fn(); err != nil {
			r.log.Error(err, "undo failed", "step", s.name)
			errs = append(errs, fmt.Errorf("undo %s: %w", s.name, err))
		}
	}
	r.steps = nil
	return errors.Join(errs...)
}

// Success forgets the undos: the setup is complete and stays.
func (r *Reverter) Success() { r.steps = nil }

// Finish is meant for a defer: when *errp is non-nil it reverts and adds the undo failures to
// *errp; otherwise it keeps the work.
func (r *Reverter) Finish(errp *error) {
	if *errp == nil {
		r.Success()
		return
	}
	if err := r.Revert(); err != nil {
		*errp = errors.Join(*errp, err)
	}
}
