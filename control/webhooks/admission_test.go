/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const minimalVMI = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"vmi1","namespace":"default"},
"spec":{"domain":{"devices":{},"resources":{"requests":{"memory":"64Mi"}}},
"volumes":[{"name":"root","containerDisk":{"image":"quay.io/kubevirt/cirros-container-disk-demo"}}]}}`

func TestMalformedRequestsAreDenied(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	for _, tc := range []struct {
		name, body, msg string
	}{
		{"not JSON", "{", "the body is not an AdmissionReview"},
		{"wrong kind", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1"}}`, "expected an admission.k8s.io/v1 AdmissionReview"},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "carries no request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, resp := postRaw(t, srv, VMIValidatePath, []byte(tc.body))
			if code != http.StatusBadRequest || resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, tc.msg) {
				t.Errorf("got %d %+v", code, resp.Result)
			}
		})
	}
	res, err := http.Get(srv.URL + VMIMutatePath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET answered %d", res.StatusCode)
	}
}

func TestBadObjectsAreDenied(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	for _, tc := range []struct {
		name string
		r    request
		msg  string
	}{
		{"wrong resource", request{path: VMIValidatePath, op: admissionv1.Create, resource: "pods", object: []byte(minimalVMI)}, "expect resource to be 'virtualmachineinstances'"},
		{"no object", request{path: VMMutatePath, op: admissionv1.Create}, "the request carries no object"},
		{"not an object", request{path: VMIMutatePath, op: admissionv1.Create, object: []byte(`[1,2]`)}, "decoding the object"},
		{"wrong types", request{path: MigrationCreateValidatePath, op: admissionv1.Create, object: []byte(`{"spec":{"vmiName":7}}`)}, "decoding the object"},
		{"update without old object", request{path: VMIValidatePath, op: admissionv1.Update, object: []byte(minimalVMI)}, "carries no old object"},
		{"unknown operation", request{path: VMValidatePath, op: "PATCH", object: []byte(`{}`)}, "unknown operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, resp := post(t, srv, tc.r)
			if code != http.StatusOK || resp.Allowed || resp.Result.Code != 400 || resp.Result.Reason != metav1.StatusReasonBadRequest ||
				!strings.Contains(resp.Result.Message, tc.msg) {
				t.Errorf("got %d %+v", code, resp.Result)
			}
		})
	}
	// Deletions are not ours; only a misconfigured rule sends them.
	if _, resp := post(t, srv, request{path: VMValidatePath, op: admissionv1.Delete}); !resp.Allowed {
		t.Errorf("DELETE denied: %+v", resp.Result)
	}
}

// panicConfig stands for a bug deep in a rule.
type panicConfig struct{}

func (panicConfig) FeatureGateEnabled(string) bool { panic("boom") }

func TestPanicsDenyOneRequest(t *testing.T) {
	srv := testServer(t, panicConfig{}, Options{})
	hostDiskVMI := strings.Replace(minimalVMI, `"containerDisk":{"image":"quay.io/kubevirt/cirros-container-disk-demo"}`,
		`"hostDisk":{"path":"/d.img","type":"Disk"}`, 1)
	code, resp := post(t, srv, request{path: VMIValidatePath, op: admissionv1.Create, object: []byte(hostDiskVMI), user: alice})
	if code != http.StatusOK || resp.Allowed || resp.Result.Code != 500 || resp.Result.Reason != metav1.StatusReasonInternalError {
		t.Errorf("got %d %+v", code, resp.Result)
	}
	// The server still answers.
	if _, resp := post(t, srv, request{path: VMIMutatePath, op: admissionv1.Create, object: []byte(minimalVMI), user: alice}); !resp.Allowed {
		t.Errorf("after a panic: %+v", resp.Result)
	}
}

func TestInvalidResponseFormat(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	obj := strings.Replace(minimalVMI, `"devices":{}`, `"devices":{"disks":[{"name":"nosuchvolume","disk":{"bus":"virtio"}},{"name":"root","disk":{"bus":"usb"}}]}`, 1)
	code, resp := post(t, srv, request{path: VMIValidatePath, op: admissionv1.Create, object: []byte(obj), user: alice})
	if code != http.StatusOK || resp.Allowed {
		t.Fatalf("got %d %+v", code, resp)
	}
	r := resp.Result
	if r.Code != 422 || r.Reason != metav1.StatusReasonInvalid || r.Status != metav1.StatusFailure {
		t.Errorf("status = %+v", r)
	}
	want := []metav1.StatusCause{
		{Type: metav1.CauseTypeFieldValueNotSupported, Message: "qvirt does not support the usb disk bus", Field: "spec.domain.devices.disks[1].disk.bus"},
		{Type: metav1.CauseTypeFieldValueInvalid, Message: "spec.domain.devices.disks[0].Name 'nosuchvolume' not found.", Field: "spec.domain.devices.disks[0].name"},
	}
	if len(r.Details.Causes) != len(want) {
		t.Fatalf("causes = %+v", r.Details.Causes)
	}
	for i := range want {
		if r.Details.Causes[i] != want[i] {
			t.Errorf("cause %d = %+v, want %+v", i, r.Details.Causes[i], want[i])
		}
	}
	if r.Message != want[0].Message+", "+want[1].Message {
		t.Errorf("message = %q", r.Message)
	}
}

func TestMutateVMIPatch(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	_, resp := post(t, srv, request{path: VMIMutatePath, op: admissionv1.Create, object: []byte(minimalVMI), user: alice})
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v", resp)
	}
	var vmi v1.VirtualMachineInstance
	if err := decodeJSON(applyPatch(t, []byte(minimalVMI), resp.Patch), &vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Spec.Domain.Machine.Type != "q35" || vmi.Status.Phase != v1.Pending || vmi.Finalizers[0] != v1.VirtualMachineInstanceFinalizer ||
		vmi.Spec.Domain.Devices.Disks[0].Disk.Bus != v1.DiskBusSATA || vmi.Spec.Domain.Firmware.UUID != FirmwareUUID("vmi1") {
		t.Errorf("after the patch: %+v", vmi)
	}
	// Updates get no defaults.
	_, resp = post(t, srv, request{path: VMIMutatePath, op: admissionv1.Update, object: []byte(minimalVMI), oldObject: []byte(minimalVMI), user: alice})
	if !resp.Allowed || resp.Patch != nil {
		t.Errorf("update patched: %s", resp.Patch)
	}
}

func TestUnknownFieldsAreRefused(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	obj := strings.Replace(minimalVMI, `"devices":{}`, `"devices":{"gpus":[{"name":"g","deviceName":"nvidia.com/A100"}]},"ioThreadsPolicy":"auto","Machine":{"type":"q35"}`, 1)
	_, mut := post(t, srv, request{path: VMIMutatePath, op: admissionv1.Create, object: []byte(obj), user: alice})
	patched := applyPatch(t, []byte(obj), mut.Patch)
	_, resp := post(t, srv, request{path: VMIValidatePath, op: admissionv1.Create, object: patched, user: alice})
	if resp.Allowed {
		t.Fatal("allowed")
	}
	for field, msg := range map[string]string{
		"spec.domain.devices.gpus":    "qvirt does not support GPUs",
		"spec.domain.ioThreadsPolicy": "qvirt does not support I/O thread policies",
		"spec.domain.Machine":         `unknown field "spec.domain.Machine"`,
	} {
		found := false
		for _, c := range resp.Result.Details.Causes {
			found = found || (c.Field == field && c.Message == msg)
		}
		if !found {
			t.Errorf("no cause %s: %s in %+v", field, msg, resp.Result.Details.Causes)
		}
	}
}

func TestVMIUpdates(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{Privileged: Privileges{Groups: []string{"qvirt:components"}}})
	old := []byte(minimalVMI)
	newSpec := []byte(strings.Replace(minimalVMI, "64Mi", "128Mi", 1))
	newStatus := []byte(strings.Replace(minimalVMI, `"spec":`, `"status":{"phase":"Running"},"spec":`, 1))
	component := authenticationv1.UserInfo{Username: "system:serviceaccount:qvirt:handler", Groups: []string{"qvirt:components"}}
	withDisk := []byte(strings.Replace(minimalVMI, `"devices":{}`, `"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]}`, 1))
	hotplugged := []byte(strings.Replace(string(withDisk), `{"name":"root","disk":{"bus":"virtio"}}`,
		`{"name":"root","disk":{"bus":"virtio"}},{"name":"data","disk":{"bus":"scsi"}}`, 1))
	hotplugged = []byte(strings.Replace(string(hotplugged), `"volumes":[`,
		`"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"data-pvc","hotpluggable":true}},`, 1))
	for _, tc := range []struct {
		name     string
		user     authenticationv1.UserInfo
		old, obj []byte
		sub      string
		denied   string
	}{
		{"user changes the spec", alice, old, newSpec, "", "spec"},
		{"user writes status", alice, old, newStatus, "status", "status"},
		{"component writes status", component, old, newStatus, "status", ""},
		{"component changes the memory", component, old, newSpec, "", "spec.domain.resources.requests.memory"},
		{"user hotplugs a volume", alice, withDisk, hotplugged, "", "spec"},
		{"component hotplugs a volume", component, withDisk, hotplugged, "", ""},
		{"component unplugs a volume", component, hotplugged, withDisk, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := post(t, srv, request{path: VMIUpdateValidatePath, op: admissionv1.Update, subResource: tc.sub, object: tc.obj, oldObject: tc.old, user: tc.user})
			switch {
			case tc.denied == "" && !resp.Allowed:
				t.Errorf("denied: %+v", resp.Result)
			case tc.denied != "" && (resp.Allowed || !causeAt(resp, tc.denied)):
				t.Errorf("want a 422 at %s, got %+v", tc.denied, resp.Result)
			}
		})
	}
}

func TestVMUpdates(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	vm := func(meta, devices, status string) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm1"%s},
"spec":{"runStrategy":"Halted","template":{"spec":{"domain":{"devices":{%s},"resources":{"requests":{"memory":"64Mi"}}}}}}%s}`,
			meta, devices, status))
	}
	valid := vm("", "", "")
	badSpec := vm("", `"disks":[{"name":"nosuchvolume"}]`, "")
	deleting := vm(`,"deletionTimestamp":"2026-01-01T00:00:00Z"`, `"disks":[{"name":"nosuchvolume"}]`, "")
	status := vm("", "", `,"status":{"stateChangeRequests":[{"action":"Start"}]}`)
	for _, tc := range []struct {
		name     string
		old, obj []byte
		sub      string
		user     authenticationv1.UserInfo
		denied   string
	}{
		{"spec made invalid", valid, badSpec, "", alice, "spec.template.spec.domain.devices.disks[0].name"},
		{"invalid spec unchanged", badSpec, badSpec, "", alice, ""},
		{"being deleted", badSpec, deleting, "", alice, ""},
		{"user writes status", valid, status, "status", alice, "status"},
		{"virt-api writes status", valid, status, "status", authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-apiserver"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := post(t, srv, request{path: VMValidatePath, op: admissionv1.Update, subResource: tc.sub, object: tc.obj, oldObject: tc.old, user: tc.user})
			switch {
			case tc.denied == "" && !resp.Allowed:
				t.Errorf("denied: %+v", resp.Result)
			case tc.denied != "" && (resp.Allowed || !causeAt(resp, tc.denied)):
				t.Errorf("want a 422 at %s, got %+v", tc.denied, resp.Result)
			}
		})
	}
}

func TestMigrationUpdate(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{})
	old := `{"metadata":{"name":"m","labels":{"kubevirt.io/vmi-name":"vmi1"}},"spec":{"vmiName":"vmi1"}}`
	changed := strings.Replace(old, `"spec":{"vmiName":"vmi1"}`, `"spec":{"vmiName":"vmi2"}`, 1)
	_, resp := post(t, srv, request{path: MigrationUpdateValidatePath, op: admissionv1.Update, object: []byte(changed), oldObject: []byte(old), user: alice})
	if resp.Allowed || !causeAt(resp, "spec") {
		t.Errorf("spec change: %+v", resp.Result)
	}
}
