package commands

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sub = "/apis/subresources.kubevirt.io/v1/namespaces/"

func TestVersionPrintsClientAndServer(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0+qvirt.9", "gitTreeState": "clean", "goVersion": "go1.26", "platform": "linux/amd64"})
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "version")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if !strings.HasPrefix(res.stdout, `Client Version: version.Info{GitVersion:"v1.9.0`) {
		t.Errorf("client line: %q", res.stdout)
	}
	if !strings.Contains(res.stdout, `Server Version: version.Info{GitVersion:"v1.9.0+qvirt.9", GitCommit:"", GitTreeState:"clean", BuildDate:"", GoVersion:"go1.26", Compiler:"", Platform:"linux/amd64"}`) {
		t.Errorf("server line: %q", res.stdout)
	}
	reqs := api.requests()
	if len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != "/apis/subresources.kubevirt.io/v1/version" || reqs[0].ClientCN != "alice" {
		t.Errorf("requests: %+v", reqs)
	}

	res = run(t, api.kubeconfig(t, "", "default"), nil, "version", "--client")
	if res.code != 0 || strings.Contains(res.stdout, "Server Version") || len(api.requests()) != 1 {
		t.Errorf("--client asked the server: %+v", res)
	}
}

func TestSubresourceRequests(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		method, path, body string
		stdout             string
	}{
		{[]string{"start", "tiny"}, "PUT", sub + "ns1/virtualmachines/tiny/start", `{}`, "VM tiny was scheduled to start\n"},
		{[]string{"start", "tiny", "--paused", "--dry-run"}, "PUT", sub + "ns1/virtualmachines/tiny/start", `{"paused":true,"dryRun":["All"]}`, "VM tiny was scheduled to start\n"},
		{[]string{"stop", "tiny"}, "PUT", sub + "ns1/virtualmachines/tiny/stop", `{}`, "VM tiny was scheduled to stop\n"},
		{[]string{"stop", "tiny", "--grace-period", "0", "--force"}, "PUT", sub + "ns1/virtualmachines/tiny/stop", `{"gracePeriod":0}`, "VM tiny was scheduled to stop\n"},
		{[]string{"stop", "tiny", "--dry-run", "-n", "other"}, "PUT", sub + "other/virtualmachines/tiny/stop", `{"dryRun":["All"]}`, "VM tiny was scheduled to stop\n"},
		{[]string{"restart", "tiny"}, "PUT", sub + "ns1/virtualmachines/tiny/restart", `{}`, "VM tiny was scheduled to restart\n"},
		{[]string{"restart", "tiny", "--force", "--grace-period=0"}, "PUT", sub + "ns1/virtualmachines/tiny/restart", `{"gracePeriodSeconds":0}`, "VM tiny was scheduled to restart\n"},
		{[]string{"migrate", "tiny", "--dry-run"}, "PUT", sub + "ns1/virtualmachines/tiny/migrate", `{"dryRun":["All"]}`, "VM tiny was scheduled to migrate\n"},
		{[]string{"migrate", "tiny", "--addedNodeSelector", "zone=a"}, "PUT", sub + "ns1/virtualmachines/tiny/migrate", `{"addedNodeSelector":{"zone":"a"}}`, "VM tiny was scheduled to migrate\n"},
		{[]string{"pause", "vm", "tiny"}, "PUT", sub + "ns1/virtualmachineinstances/tiny/pause", `{}`, "VMI tiny was scheduled to pause\n"},
		{[]string{"pause", "VMI", "tiny", "--dry-run"}, "PUT", sub + "ns1/virtualmachineinstances/tiny/pause", `{"dryRun":["All"]}`, "VMI tiny was scheduled to pause\n"},
		{[]string{"unpause", "virtualmachine", "tiny"}, "PUT", sub + "ns1/virtualmachineinstances/tiny/unpause", `{}`, "VMI tiny was scheduled to unpause\n"},
		{[]string{"soft-reboot", "tiny"}, "PUT", sub + "ns1/virtualmachineinstances/tiny/softreboot", ``, "VMI tiny was scheduled to soft-reboot\n"},
		{[]string{"reset", "tiny"}, "PUT", sub + "ns1/virtualmachineinstances/tiny/reset", ``, "VMI tiny was scheduled to reset\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusAccepted)
			})
			res := run(t, api.kubeconfig(t, "", "ns1"), nil, tc.args...)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			if res.stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", res.stdout, tc.stdout)
			}
			reqs := api.requests()
			if len(reqs) != 1 {
				t.Fatalf("requests: %+v", reqs)
			}
			got := reqs[0]
			if got.Method != tc.method || got.Path != tc.path || got.Body != tc.body {
				t.Errorf("request %s %s %s, want %s %s %s", got.Method, got.Path, got.Body, tc.method, tc.path, tc.body)
			}
		})
	}
}

func TestFailuresPrintKubeVirtsMessages(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		msg    string
		stderr string
	}{
		{[]string{"start", "tiny"}, "VM is already running", "Error starting VirtualMachine VM is already running"},
		{[]string{"stop", "tiny"}, "VM is not running", "error stopping VirtualMachine VM is not running"},
		{[]string{"restart", "tiny"}, "VM is not running", "error restarting VirtualMachine: VM is not running"},
		{[]string{"migrate", "tiny"}, "VM is not running", "Error migrating VirtualMachine VM is not running"},
		{[]string{"pause", "vm", "tiny"}, "VMI is already paused", "Error pausing VirtualMachineInstance tiny: VMI is already paused"},
		{[]string{"unpause", "vm", "tiny"}, "VMI is not paused", "Error unpausing VirtualMachineInstance tiny: VMI is not paused"},
		{[]string{"soft-reboot", "tiny"}, "VM is not running", "Error soft rebooting VirtualMachineInstance tiny: VM is not running"},
		{[]string{"guestosinfo", "tiny"}, "VMI does not have guest agent connected", "Error getting guestosinfo of VirtualMachineInstance tiny, VMI does not have guest agent connected"},
		{[]string{"fslist", "tiny"}, "VMI does not have guest agent connected", "Error getting filesystemlist of VirtualMachineInstance tiny, VMI does not have guest agent connected"},
		{[]string{"screenshot", "tiny", "-f", "-"}, "VMI is not running", "Can't access VMI tiny: VMI is not running"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/version") {
					_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.1"})
					return
				}
				writeStatus(w, http.StatusConflict, "Conflict", tc.msg)
			})
			res := run(t, api.kubeconfig(t, "", "default"), nil, tc.args...)
			if res.code == 0 {
				t.Fatal("exit 0 on a 409")
			}
			if res.stderr != tc.stderr+"\n" {
				t.Errorf("stderr %q, want %q", res.stderr, tc.stderr)
			}
		})
	}
}

func TestVersionSkewIsReportedAfterAFailure(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.5.0"})
			return
		}
		writeStatus(w, http.StatusConflict, "Conflict", "VM is not running")
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "stop", "tiny")
	if res.code == 0 || !strings.Contains(res.stderr, "different from the KubeVirt version running in the cluster") ||
		!strings.HasSuffix(res.stderr, "error stopping VirtualMachine VM is not running\n") {
		t.Errorf("%+v", res)
	}
}

func TestArgumentErrorsSendNothing(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stop", "tiny", "--force"}, "Must both use --force=true and set --grace-period."},
		{[]string{"restart", "tiny", "--grace-period", "0"}, "Must both use --force=true and set --grace-period."},
		{[]string{"pause", "pod", "tiny"}, "unsupported resource type 'pod'"},
		{[]string{"pause", "tiny"}, "accepts 2 arg(s), received 1"},
		{[]string{"start"}, "accepts 1 arg(s), received 0"},
		{[]string{"screenshot", "tiny"}, `required flag(s) "file" not set`},
		{[]string{"port-forward", "tiny", "80"}, "target must contain type and name separated by '/'"},
		{[]string{"port-forward", "vm/tiny", "http"}, `invalid port "http"`},
		{[]string{"port-forward", "vm/tiny", "--stdio", "80", "81"}, "only one port supported when forwarding to stdout"},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "virtctl"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
			})
			res := run(t, api.kubeconfig(t, "", "default"), nil, tc.args...)
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q, want %q", res.code, res.stderr, tc.want)
			}
			for _, r := range api.requests() {
				t.Errorf("sent %s %s", r.Method, r.Path)
			}
		})
	}
}

func TestMigrateCancelDeletesTheUnfinishedMigration(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodGet:
			_, _ = w.Write([]byte(`{"kind":"VirtualMachineInstanceMigrationList","apiVersion":"kubevirt.io/v1","metadata":{},"items":[
				{"metadata":{"name":"old"},"spec":{"vmiName":"tiny"},"status":{"phase":"Succeeded"}},
				{"metadata":{"name":"live"},"spec":{"vmiName":"tiny"},"status":{"phase":"Running"}}]}`))
		case http.MethodDelete:
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
		}
	})
	res := run(t, api.kubeconfig(t, "", "ns1"), nil, "migrate-cancel", "tiny")
	if res.code != 0 || res.stdout != "migration of VMI tiny was canceled\n" {
		t.Fatalf("%+v", res)
	}
	reqs := api.requests()
	if len(reqs) != 2 {
		t.Fatalf("requests: %+v", reqs)
	}
	if reqs[0].Path != "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstancemigrations" || reqs[0].Query != "labelSelector=kubevirt.io%2Fvmi-name%3D%3Dtiny" {
		t.Errorf("list: %+v", reqs[0])
	}
	if reqs[1].Method != "DELETE" || reqs[1].Path != "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstancemigrations/live" {
		t.Errorf("delete: %+v", reqs[1])
	}
}

func TestMigrateCancelWithNothingToCancel(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"VirtualMachineInstanceMigrationList","apiVersion":"kubevirt.io/v1","metadata":{},"items":[]}`))
	})
	res := run(t, api.kubeconfig(t, "", "default"), nil, "migrate-cancel", "tiny")
	if res.code == 0 || res.stderr != "Found no migration to cancel for tiny\n" {
		t.Errorf("%+v", res)
	}
}

func TestScreenshotWritesThePNG(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(png)
	})
	file := filepath.Join(t.TempDir(), "out.png")
	res := run(t, api.kubeconfig(t, "", "default"), nil, "screenshot", "tiny", "--file", file)
	if res.code != 0 {
		t.Fatalf("%+v", res)
	}
	if b, _ := os.ReadFile(file); string(b) != string(png) {
		t.Errorf("file holds %q", b)
	}
	if r := api.requests()[0]; r.Method != "GET" || r.Path != sub+"default/virtualmachineinstances/tiny/vnc/screenshot" {
		t.Errorf("request %+v", r)
	}
	// KubeVirt's spelling, under vnc.
	res = run(t, api.kubeconfig(t, "", "default"), nil, "vnc", "screenshot", "tiny", "-f", "-")
	if res.code != 0 || res.stdout != string(png) {
		t.Errorf("%+v", res)
	}
}

func TestHelpListsTheCommands(t *testing.T) {
	res := run(t, "/nonexistent", nil, "--help")
	for _, c := range []string{"version", "start", "stop", "restart", "pause", "unpause", "migrate", "migrate-cancel", "soft-reboot", "console", "vnc", "port-forward", "screenshot", "addvolume", "removevolume", "memory-dump"} {
		if !strings.Contains(res.stdout, "\n  "+c+" ") {
			t.Errorf("help lacks %s:\n%s", c, res.stdout)
		}
	}
	if !strings.Contains(res.stdout, "--kubeconfig") || !strings.Contains(res.stdout, "-n, --namespace") || !strings.Contains(res.stdout, "--context") {
		t.Errorf("help lacks the kubeconfig flags:\n%s", res.stdout)
	}
}
