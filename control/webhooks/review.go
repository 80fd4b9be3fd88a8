/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const (
	vmiResource       = "virtualmachineinstances"
	vmResource        = "virtualmachines"
	migrationResource = "virtualmachineinstancemigrations"
)

// object is what the three kinds have in common here.
type object interface {
	v1.VirtualMachineInstance | v1.VirtualMachine | v1.VirtualMachineInstanceMigration
}

// decodeRequest checks the resource and decodes the object and, on update, the
// old object. The decoding is case-sensitive, as the API server's is.
func decodeRequest[T object](req *admissionv1.AdmissionRequest, resource string) (obj, old *T, resp *admissionv1.AdmissionResponse) {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
	case admissionv1.Delete, admissionv1.Connect:
		// Not ours to judge; only a misconfigured rule sends these.
		return nil, nil, allow()
	default:
		return nil, nil, badRequest("unknown operation %q", req.Operation)
	}
	gvr := req.Resource
	if gvr.Group != v1.GroupName || gvr.Resource != resource || (gvr.Version != "v1" && gvr.Version != "v1alpha3") {
		return nil, nil, badRequest("expect resource to be '%s', got %s", resource, gvr.String())
	}
	obj, err := decodeRaw[T](req.Object, "object")
	if err != nil {
		return nil, nil, badRequest("%s", err.Error())
	}
	if req.Operation == admissionv1.Update {
		if old, err = decodeRaw[T](req.OldObject, "old object"); err != nil {
			return nil, nil, badRequest("%s", err.Error())
		}
	}
	return obj, old, nil
}

func decodeRaw[T object](raw runtime.RawExtension, what string) (*T, error) {
	if len(raw.Raw) == 0 {
		return nil, fmt.Errorf("the request carries no %s", what)
	}
	obj := new(T)
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw.Raw, obj); err != nil {
		return nil, fmt.Errorf("decoding the %s: %v", what, err)
	}
	return obj, nil
}

func (s *server) privileged(req *admissionv1.AdmissionRequest) bool {
	return s.opts.Privileged.Allows(req.UserInfo)
}

func (s *server) mutateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vmi, _, resp := decodeRequest[v1.VirtualMachineInstance](req, vmiResource)
	if resp != nil {
		return resp
	}
	// Only creation gets defaults: an existing VMI's spec does not change.
	if req.Operation != admissionv1.Create {
		return allow()
	}
	SetVMIDefaults(vmi, s.cfg)
	return patchResponse(req.Object.Raw, vmi, []string{"spec"}, []string{"metadata", "finalizers"}, []string{"status", "phase"})
}

func (s *server) validateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vmi, old, resp := decodeRequest[v1.VirtualMachineInstance](req, vmiResource)
	if resp != nil {
		return resp
	}
	switch req.Operation {
	case admissionv1.Create:
		errs := unknownFields(req.Object.Raw, vmi)
		errs = append(errs, ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, s.cfg)...)
		errs = append(errs, ValidateVMIMetadata(field.NewPath("metadata"), &vmi.ObjectMeta, s.privileged(req))...)
		return verdict(errs)
	case admissionv1.Update:
		return verdict(ValidateVMIUpdate(old, vmi, req.UserInfo, s.opts.Privileged))
	}
	return allow()
}

func (s *server) mutateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm, _, resp := decodeRequest[v1.VirtualMachine](req, vmResource)
	if resp != nil {
		return resp
	}
	if req.SubResource != "" || vm.DeletionTimestamp != nil {
		return allow()
	}
	SetVMDefaults(vm, s.cfg)
	return patchResponse(req.Object.Raw, vm, []string{"spec", "template", "spec"})
}

func (s *server) validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm, old, resp := decodeRequest[v1.VirtualMachine](req, vmResource)
	if resp != nil {
		return resp
	}
	// Finalizers must come off a VM being deleted whatever its spec says.
	if vm.DeletionTimestamp != nil {
		return allow()
	}
	var errs field.ErrorList
	if req.Operation == admissionv1.Update {
		errs = ValidateVMUpdate(old, vm, req.UserInfo, s.opts.Privileged)
	}
	// A spec that does not change is not judged again by rules that may have
	// tightened since it was stored.
	if req.Operation == admissionv1.Create || (req.SubResource == "" && !equality.Semantic.DeepEqual(old.Spec, vm.Spec)) {
		errs = append(errs, unknownFields(req.Object.Raw, vm)...)
		errs = append(errs, ValidateVMSpec(field.NewPath("spec"), &vm.Spec, s.cfg)...)
		if vm.Spec.Template != nil {
			errs = append(errs, ValidateVMIMetadata(field.NewPath("spec", "template", "metadata"), &vm.Spec.Template.ObjectMeta, s.privileged(req))...)
		}
	}
	return verdict(errs)
}

func (s *server) mutateMigration(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m, _, resp := decodeRequest[v1.VirtualMachineInstanceMigration](req, migrationResource)
	if resp != nil {
		return resp
	}
	if req.Operation != admissionv1.Create {
		return allow()
	}
	SetMigrationDefaults(m)
	return patchResponse(req.Object.Raw, m, []string{"metadata", "labels"}, []string{"metadata", "finalizers"})
}

func (s *server) validateMigration(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m, old, resp := decodeRequest[v1.VirtualMachineInstanceMigration](req, migrationResource)
	if resp != nil {
		return resp
	}
	switch req.Operation {
	case admissionv1.Create:
		errs := unknownFields(req.Object.Raw, m)
		errs = append(errs, ValidateMigration(field.NewPath("spec"), &m.Spec)...)
		if len(errs) > 0 || s.opts.Migrations == nil {
			return verdict(errs)
		}
		if m.Namespace == "" {
			m.Namespace = req.Namespace
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.LookupTimeout)
		defer cancel()
		vmi, others, err := lookupMigrationTarget(ctx, s.opts.Migrations, m)
		if err != nil {
			s.opts.Logger.Error(err, "checking a new migration", "migration", req.Namespace+"/"+req.Name, "vmi", m.Spec.VMIName)
			return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "checking the migration of VMI %s: %v", m.Spec.VMIName, err)
		}
		return verdict(ValidateMigrationTarget(m, vmi, others))
	case admissionv1.Update:
		return verdict(ValidateMigrationUpdate(old, m, req.UserInfo, s.opts.Privileged))
	}
	return allow()
}

func patchResponse(raw []byte, mutated any, paths ...[]string) *admissionv1.AdmissionResponse {
	patch, err := jsonPatch(raw, mutated, paths...)
	if err != nil {
		return badRequest("computing the defaults patch: %v", err)
	}
	return allowWithPatch(patch)
}
