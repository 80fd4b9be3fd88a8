package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// call is one request and the answer it must get: its code and a part of its message.
type call struct {
	path, body string
	code       int
	msg        string
}

// expect sends each call as alice (a PUT) and checks the answers: errors must be Statuses
// whose message holds msg.
func (e *env) expect(t *testing.T, calls []call) {
	t.Helper()
	for _, c := range calls {
		code, body := e.do(t, "PUT", ns+c.path, "alice", c.body)
		msg := body
		if code >= 400 {
			var st metav1.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || int(st.Code) != code {
				t.Errorf("PUT %s: error is not a Status: %s", c.path, body)
				continue
			}
			msg = st.Message
		}
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("PUT %s %s: %d %s; want %d %q", c.path, c.body, code, msg, c.code, c.msg)
		}
	}
}

func (e *env) vmi(t *testing.T, name string) *v1.VirtualMachineInstance {
	t.Helper()
	v := &v1.VirtualMachineInstance{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *env) vm(t *testing.T, name string) *v1.VirtualMachine {
	t.Helper()
	v := &v1.VirtualMachine{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
		t.Fatal(err)
	}
	return v
}

func claimVolume(name, claim string, hot bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}, Hotpluggable: hot}}}
}

func scsiDisk(name string) v1.Disk {
	return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}}
}

// withVolumes gives a spec a boot disk, a hotplugged claim hot1 (claim c1) and a CD-ROM
// drive without a volume.
func withVolumes(spec *v1.VirtualMachineInstanceSpec) {
	spec.Domain.Devices.Disks = []v1.Disk{
		{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
		scsiDisk("hot1"),
		{Name: "cd", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}}},
	}
	spec.Volumes = []v1.Volume{
		{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk"}}},
		claimVolume("hot1", "c1", true),
	}
}

func volumeNames(vols []v1.Volume) string {
	var n []string
	for _, v := range vols {
		n = append(n, v.Name)
	}
	return strings.Join(n, ",")
}

func diskNames(disks []v1.Disk) string {
	var n []string
	for _, d := range disks {
		n = append(n, d.Name)
	}
	return strings.Join(n, ",")
}

const addData = `{"name":"data","disk":{"disk":{"bus":"scsi"},"serial":"D1"},"volumeSource":{"persistentVolumeClaim":{"claimName":"c2"}}}`

func addBody(disk, source string) string {
	return `{"name":"data","disk":` + disk + `,"volumeSource":` + source + `}`
}

const pvcSource = `{"persistentVolumeClaim":{"claimName":"c2"}}`

// TestAddVolumeOptionsAreChecked: every rule on an addvolume or removevolume body answers
// before anything is read, with KubeVirt's message where KubeVirt has one.
func TestAddVolumeOptionsAreChecked(t *testing.T) {
	running := vmi("running", v1.Running)
	withVolumes(&running.Spec)
	e := newEnv(t, running)
	const p = "/virtualmachineinstances/running/addvolume"
	e.expect(t, []call{
		{p, "", 400, "AddVolumeOptions requires name to be set"},
		{p, `{"name":"data"}`, 400, "AddVolumeOptions requires disk to not be nil"},
		{p, `{"name":"data","disk":{}}`, 400, "AddVolumeOptions requires VolumeSource to not be nil"},
		{p, addBody(`{"disk":{"bus":"scsi"}}`, `{}`), 400, "AddVolumeOptions requires exactly one volume source"},
		{p, addBody(`{"disk":{"bus":"scsi"}}`, `{"persistentVolumeClaim":{"claimName":"c2"},"dataVolume":{"name":"dv"}}`), 400, "requires exactly one volume source"},
		{p, addBody(`{"disk":{"bus":"scsi"}}`, `{"dataVolume":{"name":"dv"}}`), 400, "DataVolumes need CDI, which this installation does not have"},
		{p, addBody(`{"disk":{"bus":"scsi"}}`, `{"persistentVolumeClaim":{}}`), 400, "requires persistentVolumeClaim.claimName to be set"},
		{p, `{"name":"Data_1","disk":{"disk":{"bus":"scsi"}},"volumeSource":` + pvcSource + `}`, 400, `AddVolumeOptions name "Data_1" is invalid`},
		{p, `{"name":"data","disk":{"disk":{"bus":"scsi"}},"volumeSource":` + pvcSource + `,"dryRun":["Some"]}`, 400, `unsupported dryRun value "Some"`},
		{p, addBody(`{}`, pvcSource), 422, "Hotplug configuration for [data] requires diskDevice of type 'disk' or 'lun' to be used."},
		{p, addBody(`{"cdrom":{"bus":"scsi"}}`, pvcSource), 422, "requires diskDevice of type 'disk' or 'lun' to be used."},
		{p, addBody(`{"disk":{"bus":"sata"}}`, pvcSource), 422, "Hotplug configuration for disk [data] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted."},
		{p, addBody(`{"disk":{}}`, pvcSource), 422, "requires bus to be 'scsi' or 'virtio'. [] is not permitted."},
		{p, addBody(`{"lun":{"bus":"scsi"}}`, pvcSource), 422, "Hotplug configuration for LUN [data]: qvirt does not support lun disks"},
		{p, addBody(`{"disk":{"bus":"scsi"},"cache":"none"}`, pvcSource), 422, "qvirt does not support disk cache modes"},
		{p, addBody(`{"disk":{"bus":"scsi"},"bootOrder":0}`, pvcSource), 422, "must have a boot order > 0"},
		{p, addBody(`{"disk":{"bus":"scsi"},"serial":"a b"}`, pvcSource), 422, "the serial must be made up of the following characters"},
		{p, addBody(`{"disk":{"bus":"scsi"},"serial":"`+strings.Repeat("s", 257)+`"}`, pvcSource), 422, "less than or equal to 256"},
		{p, "not json", 400, "not valid options"},
		{"/virtualmachineinstances/running/removevolume", "", 400, "RemoveVolumeOptions requires name to be set"},
		{"/virtualmachineinstances/running/removevolume", `{"name":"hot1","dryRun":["x"]}`, 400, `unsupported dryRun value "x"`},
		// The VM's messages start as KubeVirt's webhook starts them for volume requests.
		{"/virtualmachines/vm1/addvolume", addBody(`{"disk":{"bus":"usb"}}`, pvcSource), 422, "AddVolume request for disk [data] requires bus"},
	})
	if got := volumeNames(e.vmi(t, "running").Spec.Volumes); got != "root,hot1" {
		t.Errorf("refused requests changed the volumes: %s", got)
	}
}

// TestVMIAddAndRemoveVolume: addvolume appends the claim, hotpluggable, and its disk to a
// running VMI's spec; removevolume takes both off again; what is not allowed is refused with
// KubeVirt's messages.
func TestVMIAddAndRemoveVolume(t *testing.T) {
	running := vmi("running", v1.Running)
	withVolumes(&running.Spec)
	bare := vmi("bare", v1.Running)
	e := newEnv(t, running, bare, vmi("booting", v1.Scheduled), vmi("done", v1.Succeeded))
	e.expect(t, []call{
		{"/virtualmachineinstances/missing/addvolume", addData, 404, `virtualmachineinstance.kubevirt.io "missing" not found`},
		{"/virtualmachineinstances/booting/addvolume", addData, 409, `Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "booting": VMI is not running`},
		{"/virtualmachineinstances/done/removevolume", `{"name":"hot1"}`, 409, "VMI is not running"},
		{"/virtualmachineinstances/running/addvolume", strings.Replace(addData, `"data"`, `"root"`, 1), 409, "Unable to add volume [root] because volume with that name already exists"},
		{"/virtualmachineinstances/running/addvolume", strings.Replace(addData, `"data"`, `"cd"`, 1), 409, "Unable to add volume [cd] because disk with that name already exists"},
		{"/virtualmachineinstances/running/addvolume", strings.Replace(addData, `"c2"`, `"c1"`, 1), 409, "Unable to add volume source [c1] because it already exists"},
		{"/virtualmachineinstances/running/removevolume", `{"name":"nope"}`, 409, "Unable to remove volume [nope] because it does not exist"},
		{"/virtualmachineinstances/running/removevolume", `{"name":"root"}`, 409, "Unable to remove volume [root] because it is not hotpluggable"},
		{"/virtualmachineinstances/running/addvolume", strings.Replace(addData, `}}}`, `}},"dryRun":["All"]}`, 1), 202, ""},
		{"/virtualmachineinstances/running/removevolume", `{"name":"hot1","dryRun":["All"]}`, 202, ""},
	})
	got := e.vmi(t, "running")
	if volumeNames(got.Spec.Volumes) != "root,hot1" || diskNames(got.Spec.Domain.Devices.Disks) != "root,hot1,cd" {
		t.Fatalf("refused or dry-run requests changed the VMI: %s / %s", volumeNames(got.Spec.Volumes), diskNames(got.Spec.Domain.Devices.Disks))
	}

	e.expect(t, []call{{"/virtualmachineinstances/running/addvolume", addData, 202, ""}})
	got = e.vmi(t, "running")
	if volumeNames(got.Spec.Volumes) != "root,hot1,data" || diskNames(got.Spec.Domain.Devices.Disks) != "root,hot1,cd,data" {
		t.Fatalf("after addvolume: %s / %s", volumeNames(got.Spec.Volumes), diskNames(got.Spec.Domain.Devices.Disks))
	}
	vol, disk := got.Spec.Volumes[2], got.Spec.Domain.Devices.Disks[3]
	if pvc := vol.PersistentVolumeClaim; pvc == nil || pvc.ClaimName != "c2" || !pvc.Hotpluggable {
		t.Errorf("added volume %+v", vol)
	}
	if disk.Disk == nil || disk.Disk.Bus != v1.DiskBusSCSI || disk.Serial != "D1" {
		t.Errorf("added disk %+v", disk)
	}

	// By its claim's name, as KubeVirt finds the volume too.
	e.expect(t, []call{{"/virtualmachineinstances/running/removevolume", `{"name":"c1"}`, 202, ""}})
	got = e.vmi(t, "running")
	if volumeNames(got.Spec.Volumes) != "root,data" || diskNames(got.Spec.Domain.Devices.Disks) != "root,cd,data" {
		t.Errorf("after removevolume: %s / %s", volumeNames(got.Spec.Volumes), diskNames(got.Spec.Domain.Devices.Disks))
	}

	// A VMI without volumes or disks gets both lists.
	e.expect(t, []call{{"/virtualmachineinstances/bare/addvolume", addData, 202, ""}})
	if got := e.vmi(t, "bare"); volumeNames(got.Spec.Volumes) != "data" || diskNames(got.Spec.Domain.Devices.Disks) != "data" {
		t.Errorf("bare VMI after addvolume: %s / %s", volumeNames(got.Spec.Volumes), diskNames(got.Spec.Domain.Devices.Disks))
	}
}

// TestVMIVolumePatchIsGuarded: a volume that someone else adds between virt-api's read and its
// patch survives, and the request is not applied over it.
func TestVMIVolumePatchIsGuarded(t *testing.T) {
	running := vmi("running", v1.Running)
	withVolumes(&running.Spec)
	raced := false
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if !raced {
			raced = true
			other := &v1.VirtualMachineInstance{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Spec.Volumes = append(other.Spec.Volumes, claimVolume("other", "c9", true))
			other.Spec.Domain.Devices.Disks = append(other.Spec.Domain.Devices.Disks, scsiDisk("other"))
			if err := c.Update(ctx, other); err != nil {
				return err
			}
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	e := newEnvWith(t, funcs, running)
	if code, body := e.do(t, "PUT", ns+"/virtualmachineinstances/running/addvolume", "alice", addData); code < 400 {
		t.Fatalf("a patch over a changed VMI succeeded: %d %s", code, body)
	}
	got := e.vmi(t, "running")
	if volumeNames(got.Spec.Volumes) != "root,hot1,other" || diskNames(got.Spec.Domain.Devices.Disks) != "root,hot1,cd,other" {
		t.Errorf("the concurrent change was lost: %s / %s", volumeNames(got.Spec.Volumes), diskNames(got.Spec.Domain.Devices.Disks))
	}
	// Tried again, the request applies on top of it.
	e.expect(t, []call{{"/virtualmachineinstances/running/addvolume", addData, 202, ""}})
	if got := e.vmi(t, "running"); volumeNames(got.Spec.Volumes) != "root,hot1,other,data" {
		t.Errorf("retry: %s", volumeNames(got.Spec.Volumes))
	}
}

// TestVMVolumeRequests: on a VM, addvolume and removevolume queue requests in
// status.volumeRequests for the VM controller, refusing what conflicts with the template or with
// a pending request.
func TestVMVolumeRequests(t *testing.T) {
	mk := func(name string, pending ...v1.VirtualMachineVolumeRequest) *v1.VirtualMachine {
		m := vm(name, v1.RunStrategyAlways)
		m.Spec.Template = &v1.VirtualMachineInstanceTemplateSpec{}
		withVolumes(&m.Spec.Template.Spec)
		m.Status.VolumeRequests = pending
		return m
	}
	add := func(name string) v1.VirtualMachineVolumeRequest {
		src := claimVolume(name, "claim-"+name, true).PersistentVolumeClaim
		d := scsiDisk(name)
		return v1.VirtualMachineVolumeRequest{AddVolumeOptions: &v1.AddVolumeOptions{Name: name, Disk: &d, VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: src}}}
	}
	remove := func(name string) v1.VirtualMachineVolumeRequest {
		return v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: &v1.RemoveVolumeOptions{Name: name}}
	}
	e := newEnv(t, mk("vm1"), mk("pending", add("data"), remove("hot1")), mk("readd", add("hot1"), add("x")), mk("removing", remove("gone")))
	e.expect(t, []call{
		{"/virtualmachines/missing/addvolume", addData, 404, `virtualmachine.kubevirt.io "missing" not found`},
		{"/virtualmachines/vm1/addvolume", strings.Replace(addData, `"data"`, `"root"`, 1), 409,
			`Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": Unable to add volume [root] because volume with that name already exists`},
		{"/virtualmachines/vm1/addvolume", strings.Replace(addData, `"c2"`, `"c1"`, 1), 409, "Unable to add volume source [c1] because it already exists"},
		{"/virtualmachines/vm1/removevolume", `{"name":"nope"}`, 409, "Unable to remove volume [nope] because it does not exist"},
		{"/virtualmachines/vm1/removevolume", `{"name":"root"}`, 409, "Unable to remove volume [root] because it is not hotpluggable"},
		{"/virtualmachines/pending/addvolume", addData, 409, "add volume request for volume [data] already exists"},
		{"/virtualmachines/pending/addvolume", strings.Replace(strings.Replace(addData, `"data"`, `"hot2"`, 1), `"c2"`, `"c7"`, 1), 202, ""},
		{"/virtualmachines/pending/removevolume", `{"name":"hot1"}`, 409, "a remove volume request for volume [hot1] already exists and is still being processed"},
		{"/virtualmachines/removing/addvolume", strings.Replace(addData, `"data"`, `"gone"`, 1), 409,
			"unable to add volume since a remove volume request for volume [gone] already exists and is still being processed"},
		{"/virtualmachines/vm1/addvolume", strings.Replace(addData, `}}}`, `}},"dryRun":["All"]}`, 1), 202, ""},
	})
	if r := e.vm(t, "vm1").Status.VolumeRequests; len(r) != 0 {
		t.Fatalf("refused or dry-run requests were queued: %+v", r)
	}
	pending := e.vm(t, "pending").Status.VolumeRequests
	if len(pending) != 3 || pending[2].AddVolumeOptions == nil || pending[2].AddVolumeOptions.Name != "hot2" {
		t.Errorf("pending after a second add: %+v", pending)
	}

	e.expect(t, []call{{"/virtualmachines/vm1/addvolume", addData, 202, ""}})
	r := e.vm(t, "vm1").Status.VolumeRequests
	if len(r) != 1 || r[0].AddVolumeOptions == nil {
		t.Fatalf("after addvolume: %+v", r)
	}
	o := r[0].AddVolumeOptions
	if o.Name != "data" || o.Disk.Name != "data" || o.Disk.Disk.Bus != v1.DiskBusSCSI ||
		o.VolumeSource.PersistentVolumeClaim.ClaimName != "c2" || !o.VolumeSource.PersistentVolumeClaim.Hotpluggable {
		t.Errorf("queued request %+v %+v", o, o.VolumeSource.PersistentVolumeClaim)
	}
	if len(e.vm(t, "vm1").Spec.Template.Spec.Volumes) != 2 {
		t.Errorf("the template changed: the VM controller applies requests")
	}

	// A removal named by the claim is queued under the volume's name, and drops the pending
	// addition of that volume while keeping the others.
	e.expect(t, []call{{"/virtualmachines/readd/removevolume", `{"name":"c1"}`, 202, ""}})
	r = e.vm(t, "readd").Status.VolumeRequests
	if len(r) != 2 || r[0].AddVolumeOptions == nil || r[0].AddVolumeOptions.Name != "x" || r[1].RemoveVolumeOptions == nil || r[1].RemoveVolumeOptions.Name != "hot1" {
		t.Errorf("after removevolume: %+v", r)
	}
	e.expect(t, []call{{"/virtualmachines/readd/addvolume", strings.Replace(addData, `"data"`, `"hot1"`, 1), 409,
		"Unable to add volume [hot1] because volume with that name already exists"}})
}
