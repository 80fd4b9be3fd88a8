package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// decodeBody reads the options of a PUT. virtctl sends them without a Content-Type and
// sometimes sends no body at all: an empty body means default options.
func decodeBody(r *http.Request, into any) error {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	case err != nil:
		return badRequest("reading the request body: %v", err)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, into); err != nil {
		return badRequest("the request body is not valid options: %v", err)
	}
	return nil
}

// dryRun is true when the caller asked for any dry run (KubeVirt accepts only "All").
func dryRun(v []string) bool { return len(v) > 0 }

func (s *Server) getVM(ctx context.Context, ns, name string) (*v1.VirtualMachine, error) {
	vm := &v1.VirtualMachine{}
	if err := s.opts.Clients.KubeVirt().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
		return nil, err
	}
	return vm, nil
}

// getVMI returns the VMI, or nil when there is none.
func (s *Server) getVMI(ctx context.Context, ns, name string) (*v1.VirtualMachineInstance, error) {
	vmi := &v1.VirtualMachineInstance{}
	if err := s.opts.Clients.KubeVirt().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return vmi, nil
}

func isFinal(vmi *v1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == v1.Succeeded || vmi.Status.Phase == v1.Failed
}

// vmRunning is KubeVirt's notion for start/stop: a VMI exists and has not finished.
func vmRunning(vmi *v1.VirtualMachineInstance) bool {
	return vmi != nil && !isFinal(vmi)
}

// handleVM loads the VM and its run strategy, then runs op; errors become Status answers.
func (s *Server) handleVM(w http.ResponseWriter, r *http.Request, opts any, op func(ctx context.Context, vm *v1.VirtualMachine, rs v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) error) {
	if err := decodeBody(r, opts); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	vm, err := s.getVM(ctx, r.PathValue("namespace"), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	rs, err := vm.RunStrategy()
	if err != nil {
		writeError(w, conflict("%v", err))
		return
	}
	vmi, err := s.getVMI(ctx, vm.Namespace, vm.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := op(ctx, vm, rs, vmi); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var o v1.StartOptions
	s.handleVM(w, r, &o, func(ctx context.Context, vm *v1.VirtualMachine, rs v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) error {
		dry := dryRun(o.DryRun)
		var data map[string]string
		if o.Paused {
			data = map[string]string{v1.StartRequestDataPausedKey: v1.StartRequestDataPausedTrue}
		}
		switch rs {
		case v1.RunStrategyHalted:
			if vmRunning(vmi) {
				return conflict("VM is already running")
			}
			if o.Paused {
				// The controller switches a Halted VM with a start request to Always itself and
				// starts its VMI from that request, paused. Patching the run strategy first
				// would let it start the VMI before it sees the request.
				return s.addStateChangeRequests(ctx, vm, dry, v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest, Data: data})
			}
			return s.patchRunStrategy(ctx, vm, rs, v1.RunStrategyAlways, dry)
		case v1.RunStrategyManual, v1.RunStrategyRerunOnFailure:
			if vmRunning(vmi) {
				return conflict("VM is already running")
			}
			return s.addStateChangeRequests(ctx, vm, dry, v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest, Data: data})
		default:
			return conflict("%s does not support manual start requests", rs)
		}
	})
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var o v1.StopOptions
	s.handleVM(w, r, &o, func(ctx context.Context, vm *v1.VirtualMachine, rs v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) error {
		dry := dryRun(o.DryRun)
		if !vmRunning(vmi) && rs != v1.RunStrategyAlways {
			return conflict("VM is not running")
		}
		if o.GracePeriod != nil && vmi != nil {
			if err := s.forceGracePeriod(ctx, vmi, *o.GracePeriod, dry); err != nil {
				return err
			}
		}
		switch rs {
		case v1.RunStrategyHalted:
			return nil // already halting: a shorter grace period was all there was to do
		case v1.RunStrategyAlways, v1.RunStrategyOnce:
			return s.patchRunStrategy(ctx, vm, rs, v1.RunStrategyHalted, dry)
		default:
			return s.addStateChangeRequests(ctx, vm, dry, v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &vmi.UID})
		}
	})
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request) {
	var o v1.RestartOptions
	s.handleVM(w, r, &o, func(ctx context.Context, vm *v1.VirtualMachine, rs v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) error {
		dry := dryRun(o.DryRun)
		switch rs {
		case v1.RunStrategyHalted, v1.RunStrategyOnce:
			return conflict("%s does not support manual restart requests", rs)
		}
		if !vmRunning(vmi) {
			return conflict("VM is not running")
		}
		if o.GracePeriodSeconds != nil {
			if err := s.forceGracePeriod(ctx, vmi, *o.GracePeriodSeconds, dry); err != nil {
				return err
			}
		}
		return s.addStateChangeRequests(ctx, vm, dry,
			v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &vmi.UID},
			v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	})
}

func (s *Server) migrate(w http.ResponseWriter, r *http.Request) {
	var o v1.MigrateOptions
	s.handleVM(w, r, &o, func(ctx context.Context, vm *v1.VirtualMachine, _ v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) error {
		if vmi == nil || vmi.Status.Phase != v1.Running {
			return conflict("VM is not running")
		}
		mig := &v1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "kubevirt-migrate-vm-", Namespace: vm.Namespace},
			Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: vm.Name, AddedNodeSelector: o.AddedNodeSelector},
		}
		var opts []client.CreateOption
		if dryRun(o.DryRun) {
			opts = append(opts, client.DryRunAll)
		}
		return s.opts.Clients.KubeVirt().Create(ctx, mig, opts...)
	})
}

// patchRunStrategy moves the VM from one run strategy to another with a JSON patch whose test
// operation fails if someone changed it in between. A VM still on the deprecated running flag
// keeps using it.
func (s *Server) patchRunStrategy(ctx context.Context, vm *v1.VirtualMachine, from, to v1.VirtualMachineRunStrategy, dry bool) error {
	var ops []map[string]any
	if vm.Spec.Running != nil {
		running := to != v1.RunStrategyHalted
		ops = []map[string]any{
			{"op": "test", "path": "/spec/running", "value": *vm.Spec.Running},
			{"op": "replace", "path": "/spec/running", "value": running},
		}
	} else {
		ops = []map[string]any{
			{"op": "test", "path": "/spec/runStrategy", "value": from},
			{"op": "replace", "path": "/spec/runStrategy", "value": to},
		}
	}
	return s.jsonPatch(ctx, vm, ops, dry)
}

// addStateChangeRequests queues requests for the VM controller. The patch carries the VM's
// resourceVersion, so two concurrent callers cannot both think they queued first.
func (s *Server) addStateChangeRequests(ctx context.Context, vm *v1.VirtualMachine, dry bool, reqs ...v1.VirtualMachineStateChangeRequest) error {
	if len(vm.Status.StateChangeRequests) > 0 {
		return conflict("VM has a pending start or stop request; try again once it is processed")
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.ResourceVersion},
		"status":   map[string]any{"stateChangeRequests": reqs},
	})
	if err != nil {
		return err
	}
	var opts []client.SubResourcePatchOption
	if dry {
		opts = append(opts, client.DryRunAll)
	}
	return s.opts.Clients.KubeVirt().Status().Patch(ctx, vm, client.RawPatch(types.MergePatchType, patch), opts...)
}

// forceGracePeriod shortens the VMI's grace period before a stop, as `--grace-period` asks.
func (s *Server) forceGracePeriod(ctx context.Context, vmi *v1.VirtualMachineInstance, grace int64, dry bool) error {
	if grace < 0 {
		return badRequest("gracePeriod must not be negative")
	}
	ops := []map[string]any{{"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": grace}}
	if vmi.Spec.TerminationGracePeriodSeconds == nil {
		ops[0]["op"] = "add"
	}
	return s.jsonPatch(ctx, vmi, ops, dry)
}

func (s *Server) jsonPatch(ctx context.Context, obj client.Object, ops []map[string]any, dry bool) error {
	b, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	var opts []client.PatchOption
	if dry {
		opts = append(opts, client.DryRunAll)
	}
	if err := s.opts.Clients.KubeVirt().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, b), opts...); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return conflict("%s changed while the request was handled; try again: %v", obj.GetName(), err)
		}
		return fmt.Errorf("patch %s: %w", obj.GetName(), err)
	}
	return nil
}
