package api

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func claim(name, size string, mode corev1.PersistentVolumeMode, access corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: &mode, AccessModes: []corev1.PersistentVolumeAccessMode{access},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
}

// guestVMI is a running VMI with 128Mi of guest memory: a dump needs a claim of
// (128Mi + 100Mi) * 1.055 = 240.5Mi, so 241Mi.
func guestVMI(name string, phase v1.VirtualMachineInstancePhase) *v1.VirtualMachineInstance {
	v := vmi(name, phase)
	q := resource.MustParse("128Mi")
	v.Spec.Domain.Memory = &v1.Memory{Guest: &q}
	return v
}

func dumpVM(name string, cur *v1.VirtualMachineMemoryDumpRequest) *v1.VirtualMachine {
	m := vm(name, v1.RunStrategyAlways)
	m.Status.MemoryDumpRequest = cur
	return m
}

// TestMemoryDumpRequests: memorydump records {claimName, Associating} on a running VM whose
// claim fits the dump, and refuses, with KubeVirt's messages, a VM that does not run, a claim
// that is missing, Block, read-only or too small, and a request while another is under way.
func TestMemoryDumpRequests(t *testing.T) {
	fs, rwo := corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce
	e := newEnv(t,
		dumpVM("vm1", nil), guestVMI("vm1", v1.Running),
		dumpVM("stopped", nil),
		dumpVM("booting", nil), guestVMI("booting", v1.Scheduling),
		dumpVM("again", &v1.VirtualMachineMemoryDumpRequest{ClaimName: "fits", Phase: v1.MemoryDumpCompleted, FileName: ptr("old.memory.dump")}),
		guestVMI("again", v1.Running),
		dumpVM("busy", &v1.VirtualMachineMemoryDumpRequest{ClaimName: "fits", Phase: v1.MemoryDumpInProgress}), guestVMI("busy", v1.Running),
		dumpVM("leaving", &v1.VirtualMachineMemoryDumpRequest{ClaimName: "fits", Phase: v1.MemoryDumpDissociating, Remove: true}),
		guestVMI("leaving", v1.Running),
		claim("fits", "241Mi", fs, rwo), claim("small", "240Mi", fs, rwo),
		claim("block", "10Gi", corev1.PersistentVolumeBlock, rwo), claim("rox", "10Gi", fs, corev1.ReadOnlyMany),
	)
	e.expect(t, []call{
		{"/virtualmachines/missing/memorydump", `{"claimName":"fits"}`, 404, `virtualmachine.kubevirt.io "missing" not found`},
		{"/virtualmachines/vm1/memorydump", "", 400, "Memory dump requires claim name to be set"},
		{"/virtualmachines/vm1/memorydump", "not json", 400, "not valid options"},
		{"/virtualmachines/stopped/memorydump", `{"claimName":"fits"}`, 404, `virtualmachineinstance.kubevirt.io "stopped" not found`},
		{"/virtualmachines/booting/memorydump", `{"claimName":"fits"}`, 409, `Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "booting": VMI is not running`},
		{"/virtualmachines/vm1/memorydump", `{"claimName":"nope"}`, 404, `persistentvolumeclaim.kubevirt.io "nope" not found`},
		{"/virtualmachines/vm1/memorydump", `{"claimName":"block"}`, 409, `Operation cannot be fulfilled on persistentvolumeclaim.kubevirt.io "block": pvc should be filesystem pvc`},
		{"/virtualmachines/vm1/memorydump", `{"claimName":"rox"}`, 409, "pvc access mode can't be read only"},
		{"/virtualmachines/vm1/memorydump", `{"claimName":"small"}`, 409, "pvc size [251659k] should be bigger then [241Mi]"},
		{"/virtualmachines/again/memorydump", `{"claimName":"small"}`, 409,
			`Operation cannot be fulfilled on virtualmachine.kubevirt.io "again": can't request memory dump for pvc [small] while pvc [fits] is still associated as the memory dump pvc`},
		{"/virtualmachines/busy/memorydump", "", 409, "memory dump request for pvc [fits] already in progress"},
		{"/virtualmachines/leaving/memorydump", `{"claimName":"fits"}`, 409, "can't dump memory for pvc [fits] a remove memory dump request is in progress"},
	})
	for _, name := range []string{"vm1", "stopped", "booting"} {
		if r := e.vm(t, name).Status.MemoryDumpRequest; r != nil {
			t.Errorf("%s: a refused request was recorded: %+v", name, r)
		}
	}

	e.expect(t, []call{
		{"/virtualmachines/vm1/memorydump", `{"claimName":"fits","phase":""}`, 202, ""},
		// Dumping again needs no claim name: the associated claim is used.
		{"/virtualmachines/again/memorydump", "", 202, ""},
	})
	for _, name := range []string{"vm1", "again"} {
		r := e.vm(t, name).Status.MemoryDumpRequest
		if r == nil || r.ClaimName != "fits" || r.Phase != v1.MemoryDumpAssociating || r.Remove || r.FileName != nil {
			t.Errorf("%s: request %+v", name, r)
		}
	}
	e.expect(t, []call{{"/virtualmachines/vm1/memorydump", `{"claimName":"fits"}`, 409, "memory dump request for pvc [fits] already in progress"}})
}

// TestRemoveMemoryDump: removememorydump marks the association for removal (Dissociating),
// and refuses a VM without one or one already being removed.
func TestRemoveMemoryDump(t *testing.T) {
	e := newEnv(t,
		dumpVM("none", nil),
		dumpVM("done", &v1.VirtualMachineMemoryDumpRequest{ClaimName: "fits", Phase: v1.MemoryDumpCompleted}),
		dumpVM("leaving", &v1.VirtualMachineMemoryDumpRequest{ClaimName: "fits", Phase: v1.MemoryDumpDissociating, Remove: true}),
	)
	e.expect(t, []call{
		{"/virtualmachines/missing/removememorydump", "", 404, `virtualmachine.kubevirt.io "missing" not found`},
		{"/virtualmachines/none/removememorydump", "", 409, "can't remove memory dump association for vm none, no association found"},
		{"/virtualmachines/leaving/removememorydump", "", 409, "memory dump remove request for pvc [fits] already exists"},
		{"/virtualmachines/done/removememorydump", "{}", 202, ""},
	})
	r := e.vm(t, "done").Status.MemoryDumpRequest
	if r == nil || r.ClaimName != "fits" || r.Phase != v1.MemoryDumpDissociating || !r.Remove {
		t.Errorf("after removememorydump: %+v", r)
	}
}

// TestMemoryDumpClaimSize is KubeVirt's rule, from the guest memory.
func TestMemoryDumpClaimSize(t *testing.T) {
	for _, tc := range []struct {
		guest, request string
		want           string
	}{
		{"128Mi", "", "241Mi"},
		{"1Gi", "", "1186Mi"},
		// memory.guest is what is dumped, also when the request is smaller (overcommit).
		{"2Gi", "1Gi", "2267Mi"},
		{"", "1Gi", "1186Mi"},
	} {
		v := vmi("x", v1.Running)
		if tc.guest != "" {
			q := resource.MustParse(tc.guest)
			v.Spec.Domain.Memory = &v1.Memory{Guest: &q}
		}
		if tc.request != "" {
			v.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.request)}
		}
		got, err := v1.MemoryDumpClaimSize(v)
		if err != nil || got.String() != tc.want {
			t.Errorf("guest %q request %q: %s %v, want %s", tc.guest, tc.request, got.String(), err, tc.want)
		}
	}
	if _, err := v1.MemoryDumpClaimSize(vmi("x", v1.Running)); err == nil {
		t.Error("a VMI without memory has a dump size")
	}
}

func ptr[T any](v T) *T { return &v }
