/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func ptr[T any](v T) *T { return &v }

func TestRunStrategy(t *testing.T) {
	always := RunStrategyAlways
	for name, tc := range map[string]struct {
		spec VirtualMachineSpec
		want VirtualMachineRunStrategy
		err  error
	}{
		"neither":       {VirtualMachineSpec{}, RunStrategyHalted, nil},
		"running true":  {VirtualMachineSpec{Running: ptr(true)}, RunStrategyAlways, nil},
		"running false": {VirtualMachineSpec{Running: ptr(false)}, RunStrategyHalted, nil},
		"strategy":      {VirtualMachineSpec{RunStrategy: ptr(RunStrategyManual)}, RunStrategyManual, nil},
		"both":          {VirtualMachineSpec{Running: ptr(false), RunStrategy: &always}, RunStrategyUnknown, ErrRunningAndRunStrategy},
	} {
		t.Run(name, func(t *testing.T) {
			vm := &VirtualMachine{Spec: tc.spec}
			got, err := vm.RunStrategy()
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestSchemeKnowsAllKinds(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{
		"VirtualMachine", "VirtualMachineList",
		"VirtualMachineInstance", "VirtualMachineInstanceList",
		"VirtualMachineInstanceMigration", "VirtualMachineInstanceMigrationList",
		"KubeVirt", "KubeVirtList",
	} {
		gvk := schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: kind}
		obj, err := s.New(gvk)
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		if got := reflect.TypeOf(obj).Elem().Name(); got != kind {
			t.Errorf("%s: scheme made a %s", kind, got)
		}
	}
	if VirtualMachineInstanceGroupVersionKind.String() != "kubevirt.io/v1, Kind=VirtualMachineInstance" {
		t.Errorf("gvk = %s", VirtualMachineInstanceGroupVersionKind)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	vm := &VirtualMachine{}
	decodeStrict(t, readFixture(t, "vm-fedora.yaml"), vm)
	cp := vm.DeepCopyObject().(*VirtualMachine)
	if !reflect.DeepEqual(vm, cp) {
		t.Fatal("copy differs")
	}
	cp.Spec.Template.Spec.Domain.Devices.Disks[0].Name = "changed"
	*cp.Spec.Template.Spec.Domain.Devices.Disks[0].BootOrder = 9
	cp.Spec.Template.ObjectMeta.Labels["kubevirt.io/vm"] = "changed"
	if d := vm.Spec.Template.Spec.Domain.Devices.Disks[0]; d.Name != "containerdisk" || *d.BootOrder != 1 ||
		vm.Spec.Template.ObjectMeta.Labels["kubevirt.io/vm"] != "vm-fedora" {
		t.Error("copy shares memory with the original")
	}
}

// KubeVirt's field names are lowerCamelCase (with a handful of acronyms it keeps
// upper-case after the first letter, and status.VSOCKCID, which it spells so). A capitalised or
// snake_case tag is a typo.
func TestJSONTagsAreCamelCase(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeOf(VirtualMachine{}).PkgPath() {
			return
		}
		seen[ty] = true
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			tag, ok := f.Tag.Lookup("json")
			if !ok {
				t.Errorf("%s.%s has no json tag", ty.Name(), f.Name)
				continue
			}
			name := strings.Split(tag, ",")[0]
			if name != "" {
				r := []rune(name)
				if (!unicode.IsLower(r[0]) && name != "VSOCKCID") || strings.ContainsAny(name, "_- ") {
					t.Errorf("%s.%s: json name %q is not lowerCamelCase", ty.Name(), f.Name, name)
				}
			}
			walk(f.Type, path+"."+name)
		}
	}
	for _, obj := range []any{VirtualMachine{}, VirtualMachineInstance{}, VirtualMachineInstanceMigration{}, KubeVirt{}} {
		walk(reflect.TypeOf(obj), "")
	}
	if len(seen) < 50 {
		t.Errorf("walked only %d types; the walk is broken", len(seen))
	}
}
