package commands

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// dumpAPI serves a VM (vmStatus its status), its VMI with 1Gi of guest memory, claims (those in
// claims exist), and accepts claim creation and the subresource PUTs.
func dumpAPI(t *testing.T, vmStatus string, claims ...string) *fakeAPI {
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, "/version"):
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
		case p == "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachines/tiny":
			_, _ = w.Write([]byte(`{"kind":"VirtualMachine","apiVersion":"kubevirt.io/v1","metadata":{"name":"tiny"},"spec":{},"status":` + vmStatus + `}`))
		case p == "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/tiny":
			_, _ = w.Write([]byte(`{"kind":"VirtualMachineInstance","apiVersion":"kubevirt.io/v1","metadata":{"name":"tiny"},"spec":{"domain":{"memory":{"guest":"1Gi"},"devices":{}}}}`))
		case r.Method == http.MethodPost && p == "/api/v1/namespaces/ns1/persistentvolumeclaims":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"dump"}}`))
		case strings.HasPrefix(p, pvcs):
			name := strings.TrimPrefix(p, pvcs)
			for _, c := range claims {
				if c == name {
					_, _ = w.Write([]byte(`{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"` + name + `"}}`))
					return
				}
			}
			writeStatus(w, http.StatusNotFound, "NotFound", `persistentvolumeclaims "`+name+`" not found`)
		case strings.HasSuffix(p, "/memorydump") && strings.Contains(vmStatus, "InProgress"):
			writeStatus(w, http.StatusConflict, "Conflict", "memory dump request for pvc [old] already in progress")
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
}

// created are the bodies of the claims a run created.
func created(api *fakeAPI) []string {
	var out []string
	for _, r := range api.requests() {
		if r.Method == http.MethodPost {
			out = append(out, r.Body)
		}
	}
	return out
}

func TestMemoryDumpRequestsAreKubeVirts(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		puts   []string
		stdout string
	}{
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump"}, []string{`virtualmachines/tiny/memorydump {"claimName":"dump","phase":""}`},
			"Successfully submitted memory dump request of VM tiny\n"},
		// Again into the claim already associated: virt-api takes it from the VM.
		{[]string{"memory-dump", "get", "tiny"}, []string{`virtualmachines/tiny/memorydump {"claimName":"","phase":""}`},
			"Successfully submitted memory dump request of VM tiny\n"},
		{[]string{"memory-dump", "remove", "tiny"}, []string{`virtualmachines/tiny/removememorydump `},
			"Successfully submitted remove memory dump association of VM tiny\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := dumpAPI(t, "{}")
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code != 0 || res.stdout != tc.stdout {
				t.Fatalf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
			}
			if got := puts(api); strings.Join(got, "\n") != strings.Join(tc.puts, "\n") {
				t.Errorf("sent %q, want %q", got, tc.puts)
			}
		})
	}
}

// TestMemoryDumpCreatesTheClaim: --create-claim makes a claim the dump fits in, by the rule
// virt-api checks, before asking for the dump.
func TestMemoryDumpCreatesTheClaim(t *testing.T) {
	api := dumpAPI(t, "{}")
	res := run(t, api.kubeconfig(t, "", "ns1"), nil, "memory-dump", "get", "tiny", "--claim-name=dump", "--create-claim",
		"--storage-class=local-path", "--access-mode=ReadWriteMany")
	if res.code != 0 {
		t.Fatalf("%+v", res)
	}
	want := "Using default 5.5% filesystem overhead for pvc size\nPVC ns1/dump created\nSuccessfully submitted memory dump request of VM tiny\n"
	if res.stdout != want {
		t.Errorf("stdout %q, want %q", res.stdout, want)
	}
	bodies := created(api)
	if len(bodies) != 1 {
		t.Fatalf("created %q", bodies)
	}
	var pvc struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			AccessModes      []string
			StorageClassName string
			Resources        struct{ Requests map[string]string }
		}
	}
	if err := json.Unmarshal([]byte(bodies[0]), &pvc); err != nil {
		t.Fatal(err)
	}
	// (1Gi + 100Mi) * 1.055, in whole MiB.
	if pvc.Kind != "PersistentVolumeClaim" || pvc.Metadata.Name != "dump" || pvc.Metadata.Namespace != "ns1" || pvc.Spec.StorageClassName != "local-path" ||
		strings.Join(pvc.Spec.AccessModes, ",") != "ReadWriteMany" || pvc.Spec.Resources.Requests["storage"] != "1186Mi" {
		t.Errorf("claim %s", bodies[0])
	}
	if got := puts(api); len(got) != 1 || got[0] != `virtualmachines/tiny/memorydump {"claimName":"dump","phase":""}` {
		t.Errorf("sent %q", got)
	}
}

func TestMemoryDumpFailures(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		vmStatus string
		claims   []string
		stderr   string
	}{
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump"}, `{"memoryDumpRequest":{"claimName":"old","phase":"InProgress"}}`, nil,
			"error dumping vm memory, memory dump request for pvc [old] already in progress"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--create-claim"}, `{"memoryDumpRequest":{"claimName":"old","phase":"Completed"}}`, nil,
			"please remove current memory dump association before creating a new claim for a new memory dump"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--create-claim"}, `{}`, []string{"dump"},
			"PVC ns1/dump already exists, check if it should be created if not remove create flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := dumpAPI(t, tc.vmStatus, tc.claims...)
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code == 0 || res.stderr != tc.stderr+"\n" {
				t.Errorf("exit %d, stderr %q, want %q", res.code, res.stderr, tc.stderr)
			}
			if c := created(api); len(c) != 0 {
				t.Errorf("created %q", c)
			}
		})
	}
}

// TestMemoryDumpRefusesWhatNeedsExport: downloading needs KubeVirt's VirtualMachineExport, and
// claim flags without --create-claim would be ignored; both are refused before any request.
func TestMemoryDumpRefusesWhatNeedsExport(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"memory-dump", "download", "tiny", "--output=dump.gz"}, "qvirt does not support downloading memory dumps"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--output=dump.gz"}, "needs KubeVirt's VirtualMachineExport"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--port-forward"}, "qvirt does not support downloading memory dumps"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--format=raw"}, "qvirt does not support downloading memory dumps"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--local-port=9000"}, "qvirt does not support downloading memory dumps"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=dump", "--storage-class=fast"}, "without it they would be ignored"},
		{[]string{"memory-dump", "get", "tiny", "--create-claim"}, "missing claim name"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=d", "--create-claim", "--access-mode=ReadOnlyMany"}, "cannot dump memory to a readonly pvc"},
		{[]string{"memory-dump", "get", "tiny", "--claim-name=d", "--create-claim", "--access-mode=RWO"}, "invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported"},
		{[]string{"memory-dump", "remove", "tiny", "--claim-name=d"}, "memory-dump remove takes no --claim-name"},
		{[]string{"memory-dump", "frob", "tiny"}, "invalid action type frob"},
		{[]string{"memory-dump", "get"}, "accepts 2 arg(s), received 1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := dumpAPI(t, "{}")
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
