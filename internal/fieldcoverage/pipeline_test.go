/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
	"github.com/qvirt/qvirt/control/controller/vm"
	"github.com/qvirt/qvirt/control/webhooks"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/node/launcherspec"
)

// cfg is a cluster with the feature gates of what qvirt runs behind one.
var cfg = webhooks.StaticConfig{webhooks.FeatureGateHostDisk: true, webhooks.FeatureGateVSOCK: true}

const testUID = types.UID("6f9619ff-8b86-d011-b42d-00cf4fc964ff")

// admitted is what became of one object: refused by the webhook, or what runs.
type admitted struct {
	refused field.ErrorList
	// err is a failure after admission: the object was accepted but cannot run.
	err  error
	pod  []byte
	spec *launcherapi.VMSpec
	argv []string
}

// decode reads obj strictly: a field the schema has and the Go type lacks fails the test.
func decode(obj map[string]any, into any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(b, into, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("fields the Go types do not have: %v", strict)
	}
	return nil
}

// admitVMI runs a VMI through the mutating and validating webhooks' functions, then renders
// what the controller and the node make of it.
func admitVMI(obj map[string]any, images launcherspec.ImageResolver) admitted {
	vmi := &v1.VirtualMachineInstance{}
	if err := decode(obj, vmi); err != nil {
		return admitted{err: err}
	}
	webhooks.SetVMIDefaults(vmi, cfg)
	if errs := webhooks.ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, cfg); len(errs) > 0 {
		return admitted{refused: errs}
	}
	return render(vmi, images)
}

// admitVM does the same for a VM: its webhooks, then the VMI its controller creates, which
// goes through the VMI webhooks in turn.
func admitVM(obj map[string]any, images launcherspec.ImageResolver) admitted {
	m := &v1.VirtualMachine{}
	if err := decode(obj, m); err != nil {
		return admitted{err: err}
	}
	webhooks.SetVMDefaults(m, cfg)
	if errs := webhooks.ValidateVMSpec(field.NewPath("spec"), &m.Spec, cfg); len(errs) > 0 {
		return admitted{refused: errs}
	}
	vmi := vm.NewVMI(m)
	webhooks.SetVMIDefaults(vmi, cfg)
	if errs := webhooks.ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, cfg); len(errs) > 0 {
		return admitted{err: fmt.Errorf("the VM was accepted, the VMI it creates is refused: %v", errs.ToAggregate())}
	}
	return render(vmi, images)
}

// render is the launcher pod (virt-controller), the launcher's VM spec (virt-handler) and
// QEMU's command line (virt-launcher).
func render(vmi *v1.VirtualMachineInstance, images launcherspec.ImageResolver) admitted {
	vmi.UID = testUID
	opts := launcherpod.DefaultOptions()
	// virt-controller finds every claim (Filesystem, 1Gi) and records it on the VMI.
	opts.Claims = map[string]*corev1.PersistentVolumeClaim{}
	for _, v := range vmi.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil {
			opts.Claims[c.ClaimName] = &corev1.PersistentVolumeClaim{}
			vmi.Status.VolumeStatus = append(vmi.Status.VolumeStatus, v1.VolumeStatus{Name: v.Name,
				PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: c.ClaimName, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}})
		}
	}
	pod, err := launcherpod.RenderLauncherPod(vmi, opts)
	if err != nil {
		return admitted{err: fmt.Errorf("launcher pod: %w", err)}
	}
	podJSON, err := json.Marshal(pod)
	if err != nil {
		return admitted{err: err}
	}
	// The node agent plumbs the interfaces on the pod network and names their taps so.
	env := launcherspec.Env{UseEmulation: true, Images: images, NICs: map[string]launcherspec.NIC{}}
	layout := qemuargs.NewLayout(launcherpod.VMDirMountPath)
	layout.EphemeralDir = launcherpod.EphemeralDisksMountPath
	pods := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil {
			pods[n.Name] = true
		}
	}
	for i, in := range vmi.Spec.Domain.Devices.Interfaces {
		if pods[in.Name] {
			env.NICs[in.Name] = launcherspec.NIC{TapFDName: "tap-" + in.Name, MAC: "02:00:00:00:00:01"}
			layout.TapFDs["tap-"+in.Name] = 3 + i
		}
	}
	// It finds the secrets of access credentials in the pod, and opens the VSOCK device of a
	// VMI virt-controller gave a context ID.
	env.SecretDirs = launcherspec.SecretDirs(pod)
	env.Claims = launcherspec.ClaimDisks(pod, vmi)
	if vmi.Spec.Domain.Devices.WantsVSOCK() {
		env.VSOCK = &launcherapi.VSOCK{GuestCid: 3, VhostFdName: "vhost-vsock"}
		layout.TapFDs["vhost-vsock"] = 90
	}
	spec, err := launcherspec.Build(vmi, env)
	if err != nil {
		return admitted{err: fmt.Errorf("launcher spec: %w", err)}
	}
	argv, err := qemuargs.Build(spec, layout)
	if err != nil {
		return admitted{err: fmt.Errorf("QEMU command line: %w", err)}
	}
	return admitted{pod: podJSON, spec: spec, argv: argv}
}

// differences names what of b differs from a.
func differences(a, b admitted) []string {
	var d []string
	if string(a.pod) != string(b.pod) {
		d = append(d, "launcher pod")
	}
	if !proto.Equal(a.spec, b.spec) {
		d = append(d, "launcher spec")
	}
	if !slices.Equal(a.argv, b.argv) {
		d = append(d, "QEMU command line")
	}
	return d
}

// notSupportedWithin returns the NotSupported causes at or below one of the paths.
func notSupportedWithin(errs field.ErrorList, paths []string) []string {
	var out []string
	for _, e := range errs {
		if e.Type != field.ErrorTypeNotSupported {
			continue
		}
		for _, p := range paths {
			if within(e.Field, p) {
				out = append(out, e.Field)
				break
			}
		}
	}
	return out
}

func causes(errs field.ErrorList) string {
	var s []string
	for _, e := range errs {
		s = append(s, fmt.Sprintf("%s %s: %s", e.Type, e.Field, e.Detail))
	}
	return strings.Join(s, "; ")
}

// images stands for the launcher pod's image volumes: every image holds every file asked
// for, a small raw image at a path of its own.
type images struct{ dir string }

func (im images) File(image, path string) (string, error) {
	sum := sha256.Sum256([]byte(image + "\x00" + path))
	p := filepath.Join(im.dir, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(p); err != nil {
		if err := os.WriteFile(p, make([]byte, 512), 0o644); err != nil {
			return "", err
		}
	}
	return p, nil
}
