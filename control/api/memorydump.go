package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// memorydump and removememorydump record the request in the VM's status.memoryDumpRequest, as
// KubeVirt does; the VM controller hotplugs the claim as a memoryDump volume, has the dump
// written and reports the phases there.

func (s *Server) memoryDump(w http.ResponseWriter, r *http.Request) {
	var o v1.VirtualMachineMemoryDumpRequest
	if err := decodeBody(r, &o); err != nil {
		writeError(w, err)
		return
	}
	s.patchMemoryDumpRequest(w, r, func(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachineMemoryDumpRequest, error) {
		claim, err := s.checkMemoryDump(ctx, vm, o.ClaimName)
		if err != nil {
			return nil, err
		}
		if cur := vm.Status.MemoryDumpRequest; cur != nil {
			if cur.Phase == v1.MemoryDumpDissociating {
				return nil, vmConflict(vm, fmt.Errorf("can't dump memory for pvc [%s] a remove memory dump request is in progress", claim))
			}
			if cur.Phase != v1.MemoryDumpCompleted && cur.Phase != v1.MemoryDumpFailed {
				return nil, vmConflict(vm, fmt.Errorf("memory dump request for pvc [%s] already in progress", claim))
			}
		}
		return &v1.VirtualMachineMemoryDumpRequest{ClaimName: claim, Phase: v1.MemoryDumpAssociating}, nil
	})
}

func (s *Server) removeMemoryDump(w http.ResponseWriter, r *http.Request) {
	s.patchMemoryDumpRequest(w, r, func(_ context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachineMemoryDumpRequest, error) {
		cur := vm.Status.MemoryDumpRequest
		if cur == nil {
			return nil, vmConflict(vm, fmt.Errorf("can't remove memory dump association for vm %s, no association found", vm.Name))
		}
		if cur.Remove {
			return nil, vmConflict(vm, fmt.Errorf("memory dump remove request for pvc [%s] already exists", cur.ClaimName))
		}
		return &v1.VirtualMachineMemoryDumpRequest{ClaimName: cur.ClaimName, Phase: v1.MemoryDumpDissociating, Remove: true}, nil
	})
}

// patchMemoryDumpRequest loads the VM, asks next for the new request and sets it, guarded by a
// test of the one it replaced.
func (s *Server) patchMemoryDumpRequest(w http.ResponseWriter, r *http.Request, next func(context.Context, *v1.VirtualMachine) (*v1.VirtualMachineMemoryDumpRequest, error)) {
	ctx := r.Context()
	vm := &v1.VirtualMachine{}
	obj, err := s.getStored(ctx, r.PathValue("namespace"), r.PathValue("name"), "virtualmachine", vm)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := next(ctx, vm)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.guardedPatch(ctx, vm, true, setStatusField(obj, "memoryDumpRequest", req), false); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func vmConflict(vm *v1.VirtualMachine, err error) error {
	return apierrors.NewConflict(kubevirtResource("virtualmachine"), vm.Name, err)
}

// checkMemoryDump returns the claim to dump to: the one asked for, else the one already
// associated. The VM must run, and the claim must be a writable filesystem large enough.
func (s *Server) checkMemoryDump(ctx context.Context, vm *v1.VirtualMachine, claim string) (string, error) {
	cur := vm.Status.MemoryDumpRequest
	switch {
	case claim == "" && cur == nil:
		return "", badRequest("Memory dump requires claim name to be set")
	case claim != "" && cur != nil && cur.ClaimName != claim:
		return "", vmConflict(vm, fmt.Errorf("can't request memory dump for pvc [%s] while pvc [%s] is still associated as the memory dump pvc", claim, cur.ClaimName))
	case claim == "":
		claim = cur.ClaimName
	}
	vmi, err := s.getVMI(ctx, vm.Namespace, vm.Name)
	if err != nil {
		return "", err
	}
	if vmi == nil {
		return "", apierrors.NewNotFound(kubevirtResource("virtualmachineinstance"), vm.Name)
	}
	if vmi.Status.Phase != v1.Running {
		return "", apierrors.NewConflict(kubevirtResource("virtualmachineinstance"), vm.Name, errors.New("VMI is not running"))
	}
	return claim, s.checkMemoryDumpClaim(ctx, vmi, claim)
}

func (s *Server) checkMemoryDumpClaim(ctx context.Context, vmi *v1.VirtualMachineInstance, name string) error {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.opts.Clients.KubeVirt().Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			// KubeVirt names the claim under its own group.
			return apierrors.NewNotFound(kubevirtResource("persistentvolumeclaim"), name)
		}
		return fmt.Errorf("unable to retrieve pvc [%s]: %w", name, err)
	}
	refuse := func(format string, a ...any) error {
		return apierrors.NewConflict(kubevirtResource("persistentvolumeclaim"), name, fmt.Errorf(format, a...))
	}
	if m := pvc.Spec.VolumeMode; m != nil && *m == corev1.PersistentVolumeBlock {
		return refuse("pvc should be filesystem pvc")
	}
	for _, m := range pvc.Spec.AccessModes {
		if m == corev1.ReadOnlyMany {
			return refuse("pvc access mode can't be read only")
		}
	}
	need, err := v1.MemoryDumpClaimSize(vmi)
	if err != nil {
		return err
	}
	size := pvc.Spec.Resources.Requests.Storage()
	have := resource.NewScaledQuantity(size.ScaledValue(resource.Kilo), resource.Kilo)
	if have.Cmp(need) < 0 {
		return refuse("pvc size [%s] should be bigger then [%s]", have, &need)
	}
	return nil
}
