package commands

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeClients puts ssh and scp on PATH that print their arguments, one per line, and exit
// with status 3 when their last argument is "fail".
func fakeClients(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; last=$a; done\n[ \"$last\" = fail ] && exit 3\nexit 0\n"
	for _, p := range []string{"ssh", "scp"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("USER", "jdoe")
}

func TestSSHAndSCPRunTheLocalClientThroughPortForward(t *testing.T) {
	fakeClients(t)
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.9.0"})
	})
	kc := api.kubeconfig(t, "", "ns1")
	self, _ := os.Executable()
	proxy := func(target, port string) string {
		return "ProxyCommand=" + self + " --kubeconfig=" + kc + " port-forward --stdio=true " + target + " " + port
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"ssh", "vmi/tiny"}, []string{"-o", proxy("vmi/tiny/ns1", "22"), "jdoe@vmi.tiny.ns1"}},
		{[]string{"ssh", "root@vm/tiny/other", "-p", "2222", "-i", "/k/id", "-c", "uname -a", "-t", "-o StrictHostKeyChecking=no"},
			[]string{"-o", proxy("vm/tiny/other", "2222"), "-o StrictHostKeyChecking=no", "-i", "/k/id", "root@vm.tiny.other", "uname -a"}},
		{[]string{"ssh", "-l", "alice", "--known-hosts", "/k/hosts", "vmi/tiny"},
			[]string{"-o", proxy("vmi/tiny/ns1", "22"), "-o", "UserKnownHostsFile=/k/hosts", "alice@vmi.tiny.ns1"}},
		{[]string{"scp", "local.txt", "root@vmi/tiny:/tmp/x"}, []string{"-o", proxy("vmi/tiny/ns1", "22"), "local.txt", "root@vmi.tiny.ns1:/tmp/x"}},
		{[]string{"scp", "-r", "--preserve", "vmi/tiny/ns2:dir", "out"}, []string{"-o", proxy("vmi/tiny/ns2", "22"), "-r", "-p", "jdoe@vmi.tiny.ns2:dir", "out"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := run(t, kc, nil, tc.args...)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			if got := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("arguments\n got %q\nwant %q", got, tc.want)
			}
			if reqs := api.requests(); len(reqs) != 0 {
				t.Errorf("virtctl itself sent %d requests; the proxy command is what connects", len(reqs))
			}
		})
	}

	// The client's exit status is virtctl's, without a message of virtctl's own.
	res := run(t, kc, nil, "ssh", "vmi/tiny", "-c", "fail")
	if res.code != 3 || res.stderr != "" {
		t.Errorf("failing ssh: exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestSSHAndSCPRefuseBadTargets(t *testing.T) {
	fakeClients(t)
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {})
	kc := api.kubeconfig(t, "", "ns1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ssh", "@vmi/tiny"}, "expected username before '@'"},
		{[]string{"ssh", "root@"}, "expected target after '@'"},
		{[]string{"ssh", "tiny"}, "target must contain type and name separated by '/'"},
		{[]string{"ssh", "pod/tiny"}, "unsupported resource type 'pod'"},
		{[]string{"scp", "a", "b"}, "none of the two provided locations seems to be a remote location"},
		{[]string{"scp", "vmi/a:x", "vmi/b:y"}, "copying from a remote location to another remote location is not supported"},
	} {
		res := run(t, kc, nil, tc.args...)
		if res.code == 0 || !strings.Contains(res.stderr, tc.want) || res.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tc.args, res.code, res.stdout, res.stderr, tc.want)
		}
	}
}
