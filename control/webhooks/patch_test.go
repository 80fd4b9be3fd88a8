/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestJSONPatch(t *testing.T) {
	raw := []byte(`{"metadata":{"name":"m","labels":{"a":"b"}},"spec":{"vmiName":"vmi1","unknownField":{"x":1}}}`)
	m := &v1.VirtualMachineInstanceMigration{}
	if err := decodeJSON(raw, m); err != nil {
		t.Fatal(err)
	}
	SetMigrationDefaults(m)
	patch, err := jsonPatch(raw, m, []string{"metadata", "labels"}, []string{"metadata", "finalizers"}, []string{"spec"}, []string{"status", "phase"})
	if err != nil {
		t.Fatal(err)
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	want := []patchOp{
		{Op: "add", Path: "/metadata/labels/kubevirt.io~1vmi-name", Value: "vmi1"},
		{Op: "add", Path: "/metadata/finalizers", Value: []any{"kubevirt.io/migrationJobFinalize"}},
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("ops = %+v, want %+v (no remove of the unknown field, nothing for an unset status)", ops, want)
	}

	if p, err := jsonPatch(raw, m, []string{"spec"}); err != nil || p != nil {
		t.Errorf("unchanged spec: %s, %v", p, err)
	}
}

func TestJSONPatchCreatesMissingParents(t *testing.T) {
	raw := []byte(`{"metadata":{"name":"x"},"spec":{"domain":{"devices":{"disks":[{"name":"a"}]},"resources":{"requests":{"memory":"1024Mi"}}},"volumes":[{"name":"a","emptyDisk":{"capacity":"1Gi"}}]}}`)
	vmi := &v1.VirtualMachineInstance{}
	if err := decodeJSON(raw, vmi); err != nil {
		t.Fatal(err)
	}
	SetVMIDefaults(vmi, StaticConfig{})
	patch, err := jsonPatch(raw, vmi, []string{"spec"}, []string{"metadata", "finalizers"}, []string{"status", "phase"})
	if err != nil {
		t.Fatal(err)
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	byPath := map[string]patchOp{}
	for _, op := range ops {
		byPath[op.Path] = op
	}
	if op := byPath["/status"]; op.Op != "add" || !reflect.DeepEqual(op.Value, map[string]any{"phase": "Pending"}) {
		t.Errorf("status op = %+v", op)
	}
	if op := byPath["/spec/domain/devices/disks"]; op.Op != "replace" {
		t.Errorf("disks op = %+v", op)
	}
	if op := byPath["/spec/domain/machine"]; op.Op != "add" {
		t.Errorf("machine op = %+v", op)
	}
	var after v1.VirtualMachineInstance
	if err := decodeJSON(applyPatch(t, raw, patch), &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.Domain.Memory.Guest.String() != "1Gi" || after.Spec.Domain.Devices.Disks[0].Disk.Bus != v1.DiskBusSATA {
		t.Errorf("after patch: %+v", after.Spec.Domain)
	}
}

func TestUnknownFieldsIgnoresEmptyAndKnown(t *testing.T) {
	raw := []byte(`{"metadata":{"name":"x","whatever":1},"status":{"foo":1},"spec":{"running":null,"runStrategy":"Always",
"template":{"metadata":{"labels":{"a":"b"},"creationTimestamp":null},"spec":{"domain":{"devices":{"disableHotplug":false,"interfaces":[{"name":"default","bridge":{}}]}}}}}}`)
	vm := &v1.VirtualMachine{}
	if err := decodeJSON(raw, vm); err != nil {
		t.Fatal(err)
	}
	if errs := unknownFields(raw, vm); len(errs) > 0 {
		t.Errorf("false positives: %v", errs)
	}
	raw = []byte(`{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"default","slirp":{}},{"name":"b","macvtap":{"x":1}}]}}}}}}`)
	vm = &v1.VirtualMachine{}
	if err := decodeJSON(raw, vm); err != nil {
		t.Fatal(err)
	}
	errs := unknownFields(raw, vm)
	expectError(t, errs, "spec.template.spec.domain.devices.interfaces[0].slirp", field.ErrorTypeNotSupported, "qvirt does not support the slirp interface binding")
	expectError(t, errs, "spec.template.spec.domain.devices.interfaces[1].macvtap", field.ErrorTypeNotSupported, "qvirt does not support the macvtap interface binding")
	if len(errs) != 2 {
		t.Errorf("errs = %v", errs)
	}
}
