package commands

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
)

const pvcs = "/api/v1/namespaces/ns1/persistentvolumeclaims/"

// volumeAPI answers a claim lookup with the claim for every name but "nope", and each
// subresource PUT with the next code of its path's list (202 once the list is used up).
func volumeAPI(t *testing.T, answers map[string][]int) *fakeAPI {
	var mu sync.Mutex
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/version"):
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
		case strings.HasPrefix(r.URL.Path, pvcs):
			name := strings.TrimPrefix(r.URL.Path, pvcs)
			if name == "nope" {
				writeStatus(w, http.StatusNotFound, "NotFound", `persistentvolumeclaims "nope" not found`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"` + name + `"}}`))
		default:
			mu.Lock()
			codes := answers[r.URL.Path]
			code := http.StatusAccepted
			if len(codes) > 0 {
				code, answers[r.URL.Path] = codes[0], codes[1:]
			}
			mu.Unlock()
			switch code {
			case http.StatusAccepted:
				w.WriteHeader(code)
			case http.StatusNotFound:
				writeStatus(w, code, "NotFound", `virtualmachine.kubevirt.io "tiny" not found`)
			case http.StatusUnprocessableEntity:
				writeStatus(w, code, "Invalid", "the server rejected our request due to an error in our request")
			default:
				writeStatus(w, code, "Conflict", "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"tiny\": VMI is not running")
			}
		}
	})
}

// puts are the subresource requests a run sent, as "PATH BODY".
func puts(api *fakeAPI) []string {
	var out []string
	for _, r := range api.requests() {
		if r.Method == http.MethodPut {
			out = append(out, strings.TrimPrefix(r.Path, sub+"ns1/")+" "+r.Body)
		}
	}
	return out
}

// TestAddAndRemoveVolumeRequests: the bodies are KubeVirt's virtctl's, sent to the VMI, or
// with --persist to the VM; a stale patch is tried again.
func TestAddAndRemoveVolumeRequests(t *testing.T) {
	const vm, vmi = "virtualmachines/tiny/", "virtualmachineinstances/tiny/"
	for _, tc := range []struct {
		args    []string
		answers map[string][]int
		puts    []string
		stdout  string
	}{
		{[]string{"addvolume", "tiny", "--volume-name=pvc1"}, nil,
			[]string{vmi + `addvolume {"name":"pvc1","disk":{"name":"","disk":{"bus":"scsi"},"serial":"pvc1"},"volumeSource":{"persistentVolumeClaim":{"claimName":"pvc1","hotpluggable":true}}}`},
			"Successfully submitted add volume request to VM tiny for volume pvc1\n"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--disk-name=data", "--serial=S1", "--bus=virtio", "--persist", "--dry-run"}, nil,
			[]string{vm + `addvolume {"name":"data","disk":{"name":"","disk":{"bus":"virtio"},"serial":"S1"},"volumeSource":{"persistentVolumeClaim":{"claimName":"pvc1","hotpluggable":true}},"dryRun":["All"]}`},
			"Successfully submitted add volume request to VM tiny for volume pvc1\n"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--disk-type=lun", "--cache=none"}, nil,
			[]string{vmi + `addvolume {"name":"pvc1","disk":{"name":"","lun":{"bus":"scsi"},"serial":"pvc1","cache":"none"},"volumeSource":{"persistentVolumeClaim":{"claimName":"pvc1","hotpluggable":true}}}`},
			"Successfully submitted add volume request to VM tiny for volume pvc1\n"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--persist"}, map[string][]int{sub + "ns1/" + vm + "addvolume": {422, 422}},
			[]string{vm + "addvolume *", vm + "addvolume *", vm + "addvolume *"},
			"Successfully submitted add volume request to VM tiny for volume pvc1\n"},
		{[]string{"removevolume", "tiny", "--volume-name=data", "--dry-run"}, nil,
			[]string{vmi + `removevolume {"name":"data","dryRun":["All"]}`},
			"Successfully submitted remove volume request to VM tiny for volume data\n"},
		{[]string{"removevolume", "tiny", "--volume-name=data", "--persist"}, map[string][]int{sub + "ns1/" + vm + "removevolume": {422}},
			[]string{vm + `removevolume {"name":"data"}`, vm + `removevolume {"name":"data"}`},
			"Successfully submitted remove volume request to VM tiny for volume data\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := volumeAPI(t, tc.answers)
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code != 0 || res.stdout != tc.stdout {
				t.Fatalf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
			}
			got := puts(api)
			if len(got) != len(tc.puts) {
				t.Fatalf("sent %q, want %q", got, tc.puts)
			}
			for i, want := range tc.puts {
				if path, ok := strings.CutSuffix(want, " *"); ok {
					want, got[i] = path, strings.SplitN(got[i], " ", 2)[0]
				}
				if got[i] != want {
					t.Errorf("request %d: %s\nwant %s", i, got[i], want)
				}
			}
		})
	}
}

func TestVolumeFailures(t *testing.T) {
	const vmi = sub + "ns1/virtualmachineinstances/tiny/"
	for _, tc := range []struct {
		args    []string
		answers map[string][]int
		stderr  string
	}{
		{[]string{"addvolume", "tiny", "--volume-name=nope"}, nil, "error adding volume, Volume nope is not a DataVolume or PersistentVolumeClaim"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1"}, map[string][]int{vmi + "addvolume": {409}},
			`error adding volume, Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "tiny": VMI is not running`},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1"}, map[string][]int{vmi + "addvolume": {422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422, 422}},
			"error adding volume after 15 retries"},
		{[]string{"removevolume", "tiny", "--volume-name=data"}, map[string][]int{vmi + "removevolume": {409}},
			`error removing volume, Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "tiny": VMI is not running`},
		// No VM to fall back from: the VMI's answer is the answer.
		{[]string{"removevolume", "tiny", "--volume-name=data", "--persist"}, map[string][]int{sub + "ns1/virtualmachines/tiny/removevolume": {404}},
			`error removing volume, virtualmachine.kubevirt.io "tiny" not found`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := volumeAPI(t, tc.answers)
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code == 0 || res.stderr != tc.stderr+"\n" {
				t.Errorf("exit %d, stderr %q, want %q", res.code, res.stderr, tc.stderr)
			}
		})
	}
}

// TestVolumeArgumentErrorsSendNothing: KubeVirt's checks of the flags, before any request.
func TestVolumeArgumentErrorsSendNothing(t *testing.T) {
	long := strings.Repeat("v", 64)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"addvolume", "tiny"}, `required flag(s) "volume-name" not set`},
		{[]string{"removevolume", "tiny"}, `required flag(s) "volume-name" not set`},
		{[]string{"addvolume", "--volume-name=pvc1"}, "accepts 1 arg(s), received 0"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--bus=sata"}, "Invalid bus type 'sata' for disk. Only 'scsi' and 'virtio' are supported."},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--disk-type=lun", "--bus=virtio"}, "Invalid bus type 'virtio' for LUN disk. Only 'scsi' bus is supported."},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--disk-type=cdrom"}, "Invalid disk type 'cdrom'. Only LUN and Disk are supported."},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--cache=fast"}, "error adding volume, invalid cache value fast"},
		{[]string{"addvolume", "tiny", "--volume-name=" + long}, "Invalid volume name " + long + ", must not exceed 63 characters. Use in conjunction with --disk-name to specify a shorter name"},
		{[]string{"addvolume", "tiny", "--volume-name=pvc1", "--disk-name=" + long}, "Invalid disk name " + long + ", must not exceed 63 characters"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := volumeAPI(t, nil)
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q, want %q", res.code, res.stderr, tc.want)
			}
			for _, r := range api.requests() {
				t.Errorf("sent %s %s", r.Method, r.Path)
			}
		})
	}
}
