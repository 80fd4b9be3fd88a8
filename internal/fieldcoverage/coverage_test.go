/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/node/launcherspec"
)

// form is one way a VMI spec reaches qvirt: as a VMI, or as the template of a VM.
type form struct {
	name string
	root *schema
	base map[string]any
	// prefix is where the VMI spec sits in the object.
	prefix []string
	admit  func(map[string]any, launcherspec.ImageResolver) admitted
}

func (f form) spec(o map[string]any) map[string]any { return obj(o, f.prefix...) }

// vmiPattern is the VMI spec path of a path of f's object.
func (f form) vmiPattern(p string) string {
	p = pattern(p)
	if rest, ok := strings.CutPrefix(p, joinSegs(f.prefix)); ok {
		return "spec" + rest
	}
	return p
}

func loadForms(t *testing.T) (vmiForm, vmForm form) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "base-vmi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]any{}
	if err := yaml.Unmarshal(b, &base); err != nil {
		t.Fatal(err)
	}
	vmiSchema, _ := loadSchema(t, "virtualmachineinstances")
	vmSchema, _ := loadSchema(t, "virtualmachines")
	vmBase := map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": deepCopy(base["metadata"]),
		"spec":     map[string]any{"runStrategy": "Always", "template": map[string]any{"spec": deepCopy(base["spec"])}},
	}
	return form{"VMI", vmiSchema, base, []string{"spec"}, admitVMI},
		form{"VM", vmSchema, vmBase, []string{"spec", "template", "spec"}, admitVM}
}

// outcome is what one field came to, for the summary.
type outcome int

const (
	refused outcome = iota
	refusedWithParent
	used
	asUnset
	elsewhere
	atRunTime
	gap
)

// TestEveryFieldIsRefusedOrUsed walks every field the CRD schemas accept in a VMI spec (as a VMI
// and as a VM's template) and, for each value it is tried with, requires that the webhook
// refuses it or that it changes the launcher pod, the launcher's VM spec or QEMU's command line,
// against the same object without it. The exceptions are listed in tables_test.go with reasons:
// among them what virt-handler attaches to the VM once it runs (attachedAtRunTime), which by
// design changes nothing QEMU starts with.
func TestEveryFieldIsRefusedOrUsed(t *testing.T) {
	vmiForm, vmForm := loadForms(t)
	spec := vmiForm.root.Properties["spec"]
	all := leaves([]string{"spec"}, spec, true)
	checkTables(t, all, vmForm.root)

	im := images{dir: t.TempDir()}
	counts := map[outcome]int{}
	noEffect := map[string]bool{}
	for _, f := range []form{vmiForm, vmForm} {
		t.Run(f.name, func(t *testing.T) {
			for _, l := range all {
				segs := append(slices.Clone(f.prefix), l.segs[1:]...)
				t.Run(l.path, func(t *testing.T) {
					for _, o := range checkLeaf(t, f, leaf{path: l.path, segs: segs, s: l.s, required: l.required}, im) {
						counts[o]++
						if o == elsewhere || o == atRunTime || o == gap {
							noEffect[l.path] = true
						}
					}
				})
			}
		})
	}
	for _, p := range append(append(keysOf(actedOnElsewhere), keysOf(attachedAtRunTime)...), keysOf(knownGaps)...) {
		if !noEffect[p] {
			t.Errorf("%s is listed as accepted without effect here, but every value of it is refused or changes what runs: drop it from actedOnElsewhere, attachedAtRunTime or knownGaps", p)
		}
	}
	t.Logf("%d fields, %d values refused, %d refused with their parent, %d used, %d same as unset, %d acted on elsewhere, %d attached at run time, %d known gaps",
		len(all), counts[refused], counts[refusedWithParent], counts[used], counts[asUnset], counts[elsewhere], counts[atRunTime], counts[gap])
	checkVMOnly(t, vmForm, im)
}

// checkLeaf tries every sample value of l in f and returns what each came to.
func checkLeaf(t *testing.T, f form, l leaf, im images) []outcome {
	t.Helper()
	sampleFor := func(p string, s *schema) []any {
		if v, ok := samples[f.vmiPattern(p)]; ok {
			return v
		}
		return genericSamples(s, true)
	}
	values := samples[l.path]
	if values == nil {
		values = genericSamples(l.s, l.required)
	}
	ctlBuilder := &builder{samples: sampleFor}
	if l.required {
		// A required field is always there: compare its first value with the others.
		ctlBuilder.set, ctlBuilder.value, values = true, values[0], values[1:]
	}
	ctl := ctlBuilder.build(f.base, f.root, l)
	complete(f.spec(ctl), l.path)
	base := f.admit(ctl, im)
	switch {
	case base.err != nil:
		t.Fatalf("without the field: %v", base.err)
	case len(base.refused) > 0:
		if at := parentsRefused(base.refused, ctlBuilder.created, joinSegs(l.segs)); len(at) > 0 {
			// Its parent alone is refused (lun: {}, tpm: {}...), and so is any value of it.
			if sameAsUnset[l.path] != nil || actedOnElsewhere[l.path] != "" || attachedAtRunTime[l.path] != "" || knownGaps[l.path] != "" {
				t.Errorf("its parent is refused (%s), yet it is listed as accepted", strings.Join(at, ", "))
			}
			t.Logf("refused with its parent: %s", causes(base.refused))
			return []outcome{refusedWithParent}
		}
		t.Fatalf("the object without the field is refused, so the test cannot tell what the field does; complete its surroundings in contexts_test.go: %s", causes(base.refused))
	}
	var out []outcome
	for _, v := range values {
		key := valueKey(v)
		b := &builder{samples: sampleFor, set: true, value: v}
		mut := b.build(f.base, f.root, l)
		complete(f.spec(mut), l.path)
		got := f.admit(mut, im)
		reason, isDefault := sameAsUnset[l.path][key]
		switch {
		case got.err != nil:
			t.Errorf("%s is accepted but cannot run: %v", key, got.err)
		case len(got.refused) > 0:
			if isDefault {
				t.Errorf("%s is listed as the same as unset (%s) but refused: %s", key, reason, causes(got.refused))
			}
			if _, chosen := samples[l.path]; !chosen && len(notSupportedWithin(got.refused, []string{"spec"})) == 0 {
				t.Errorf("the generic sample %s is refused as malformed (%s): give the field well-formed values in samples", key, causes(got.refused))
			}
			t.Logf("%s: refused: %s", key, causes(got.refused))
			out = append(out, refused)
		default:
			d := differences(base, got)
			switch {
			case isDefault && slices.ContainsFunc(d, func(s string) bool { return s != "launcher spec" }):
				// The launcher's spec may carry the value on, as long as QEMU runs the same.
				t.Errorf("%s is listed as the same as unset (%s) but changes the %s", key, reason, strings.Join(d, ", "))
			case isDefault:
				t.Logf("%s: same as unset: %s", key, reason)
				out = append(out, asUnset)
			case len(d) > 0:
				t.Logf("%s: changes the %s", key, strings.Join(d, ", "))
				out = append(out, used)
			case actedOnElsewhere[l.path] != "":
				t.Logf("%s: acted on by %s", key, actedOnElsewhere[l.path])
				out = append(out, elsewhere)
			case attachedAtRunTime[l.path] != "":
				t.Logf("%s: attached at run time: %s", key, attachedAtRunTime[l.path])
				out = append(out, atRunTime)
			case knownGaps[l.path] != "":
				t.Logf("%s: KNOWN GAP, accepted without effect: %s", key, knownGaps[l.path])
				out = append(out, gap)
			default:
				t.Errorf("%s is accepted and changes nothing qvirt runs: refuse it in control/webhooks, act on it, or (when it means what leaving it out means) list it in sameAsUnset", key)
			}
		}
	}
	return out
}

// parentsRefused returns the NotSupported causes at objects the builder created on the way to
// the leaf (leafPattern): then the leaf is refused with its parent, whatever its value.
func parentsRefused(errs field.ErrorList, created []string, leafPattern string) []string {
	var out []string
	for _, f := range notSupportedWithin(errs, created) {
		if within(leafPattern, pattern(f)) {
			out = append(out, f)
		}
	}
	return out
}

// checkVMOnly tries the VM's own fields: the template is covered by the VMI walk.
func checkVMOnly(t *testing.T, f form, im images) {
	spec := f.root.Properties["spec"]
	for _, l := range leaves([]string{"spec"}, spec, true) {
		if strings.HasPrefix(l.path, "spec.template.") || slices.Contains(l.segs, "metadata") {
			continue
		}
		if vmOnly[l.path] != "" {
			continue
		}
		t.Run("VMSpec/"+l.path, func(t *testing.T) {
			for _, o := range checkLeaf(t, f, l, im) {
				if o != refused && o != refusedWithParent {
					t.Errorf("a value is accepted: the VM's own fields must be refused or listed in vmOnly")
				}
			}
		})
	}
}

// checkTables keeps the lists of exceptions from naming fields the schemas do not have.
func checkTables(t *testing.T, all []leaf, vm *schema) {
	t.Helper()
	known := map[string]bool{}
	for _, l := range all {
		known[l.path] = true
	}
	for name, keys := range map[string][]string{
		"samples":           keysOf(samples),
		"sameAsUnset":       keysOf(sameAsUnset),
		"actedOnElsewhere":  keysOf(actedOnElsewhere),
		"attachedAtRunTime": keysOf(attachedAtRunTime),
		"knownGaps":         keysOf(knownGaps),
	} {
		for _, k := range keys {
			if !known[k] {
				t.Errorf("%s names %s, which is no field of the VMI spec schema", name, k)
			}
		}
	}
	for p, values := range sameAsUnset {
		if !known[p] {
			continue
		}
		var tried []string
		for _, l := range all {
			if l.path == p {
				vs := samples[p]
				if vs == nil {
					vs = genericSamples(l.s, l.required)
				}
				for _, v := range vs {
					tried = append(tried, valueKey(v))
				}
			}
		}
		for v := range values {
			if !slices.Contains(tried, v) {
				t.Errorf("sameAsUnset lists %s=%s, which is not among the values tried (%v)", p, v, tried)
			}
		}
	}
	vmPaths := map[string]bool{}
	schemaPaths([]string{"spec"}, vm.Properties["spec"], vmPaths)
	for p := range vmOnly {
		if !vmPaths[p] {
			t.Errorf("vmOnly names %s, which is no field of the VM spec schema", p)
		}
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func valueKey(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fmt.Sprint(v)
}
