package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"strconv"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// Annotations the VM controller puts on the VMIs it creates.
const (
	// GenerationAnnotation is the VM generation the VMI was made from (or last
	// found equivalent to); KubeVirt's key.
	GenerationAnnotation = "kubevirt.io/vm-generation"
	// TemplateHashAnnotation fingerprints the template spec the VMI was made
	// from. The VMI's own spec cannot serve: admission defaults change it.
	TemplateHashAnnotation = "qvirt.io/vm-template-hash"
)

// firmwareUUIDNamespace is KubeVirt's namespace for name-based firmware UUIDs,
// so a VM keeps the same SMBIOS UUID here as under KubeVirt.
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// FirmwareUUID is the stable firmware UUID of a VM without an explicit one: the
// guest sees the same machine across restarts.
func FirmwareUUID(vmName string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(vmName)).String())
}

// TemplateHash fingerprints the VMI spec of vm's template, but for its hotplugged volumes:
// changing those needs no restart.
func TemplateHash(vm *virtv1.VirtualMachine) string {
	var spec virtv1.VirtualMachineInstanceSpec
	if vm.Spec.Template != nil {
		spec = withoutHotplugged(vm.Spec.Template.Spec)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		// A spec read from the API always marshals; an empty hash only means
		// "unknown" and disables RestartRequired.
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// NewVMI renders the VMI vm starts: named like the VM, labels and annotations
// from the template, controlled by the VM, with the VM controller's finalizer
// so that the VM sees how the VMI ended before it disappears.
func NewVMI(vm *virtv1.VirtualMachine) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name,
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
			Finalizers:      []string{virtv1.VirtualMachineControllerFinalizer},
		},
	}
	if t := vm.Spec.Template; t != nil {
		vmi.Labels = maps.Clone(t.ObjectMeta.Labels)
		vmi.Annotations = maps.Clone(t.ObjectMeta.Annotations)
		vmi.Spec = *t.Spec.DeepCopy()
		withoutMemoryDump(vm, &vmi.Spec)
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[GenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	vmi.Annotations[TemplateHashAnnotation] = TemplateHash(vm)

	if hasStartPausedRequest(vm) {
		s := virtv1.StartStrategyPaused
		vmi.Spec.StartStrategy = &s
	}
	if vmi.Spec.Domain.Firmware == nil {
		vmi.Spec.Domain.Firmware = &virtv1.Firmware{}
	}
	if vmi.Spec.Domain.Firmware.UUID == "" {
		vmi.Spec.Domain.Firmware.UUID = FirmwareUUID(vm.Name)
	}
	return vmi
}

// vmiGeneration is the VM generation recorded on vmi, or -1.
func vmiGeneration(vmi *virtv1.VirtualMachineInstance) int64 {
	g, err := strconv.ParseInt(vmi.Annotations[GenerationAnnotation], 10, 64)
	if err != nil {
		return -1
	}
	return g
}

// restartRequired reports a live VMI made from a template spec that has
// changed since.
func restartRequired(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	if vmi == nil || vmi.DeletionTimestamp != nil || vmi.Status.Phase == virtv1.Succeeded || vmi.Status.Phase == virtv1.Failed {
		return false
	}
	h := vmi.Annotations[TemplateHashAnnotation]
	return h != "" && h != TemplateHash(vm)
}
