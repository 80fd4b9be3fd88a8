package accesscred

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// secretDir lays files out as the kubelet does: the content in a timestamped directory, ..data
// pointing at it, and each key a link through ..data.
func secretDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_12_03_10_00_00.123")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadDesiredGathersKeysPerUserAndPasswords(t *testing.T) {
	a := secretDir(t, map[string]string{"b": "ssh-ed25519 BBB b@x\n", "a": "ssh-ed25519 AAA a@x\n\n# a comment\nssh-rsa CCC c@x"})
	b := secretDir(t, map[string]string{"key": "ssh-ed25519 DDD d@x"})
	pw := secretDir(t, map[string]string{"root": "s3cret\n", "jdoe": "pa ss"})
	creds := []*launcherapi.AccessCredential{
		{Dir: a, Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{GuestAgentUsers: []string{"root", "jdoe"}}}},
		{Dir: b, Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{GuestAgentUsers: []string{"root"}}}},
		// A noCloud credential is the seed's business, not the agent's.
		{Dir: b, Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{NoCloud: true}}},
		{Dir: pw, Kind: &launcherapi.AccessCredential_UserPasswords{UserPasswords: &launcherapi.UserPasswords{}}},
	}
	if !ThroughGuestAgent(creds) || ThroughGuestAgent(creds[2:3]) {
		t.Errorf("ThroughGuestAgent")
	}
	d, err := ReadDesired(creds)
	if err != nil {
		t.Fatal(err)
	}
	want := Desired{
		AuthorizedKeys: map[string][]string{
			"root": {"ssh-ed25519 AAA a@x", "ssh-rsa CCC c@x", "ssh-ed25519 BBB b@x", "ssh-ed25519 DDD d@x"},
			"jdoe": {"ssh-ed25519 AAA a@x", "ssh-rsa CCC c@x", "ssh-ed25519 BBB b@x"},
		},
		Passwords: map[string]string{"root": "s3cret", "jdoe": "pa ss"},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got %+v\nwant %+v", d, want)
	}
	if _, err := ReadDesired([]*launcherapi.AccessCredential{{Dir: filepath.Join(a, "missing"), Kind: creds[0].Kind}}); err == nil {
		t.Error("a missing secret directory was read as no keys")
	}
}

func TestWithSeedKeysAddsPublicKeysToEveryCloudInitDisk(t *testing.T) {
	keys := secretDir(t, map[string]string{"k": "ssh-ed25519 AAA <a&b>@x\nssh-rsa BBB"})
	agentOnly := secretDir(t, map[string]string{"k": "ssh-ed25519 ZZZ"})
	spec := &launcherapi.VMSpec{
		Disks: []*launcherapi.Disk{
			{Name: "root", Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 1}}},
			{Name: "ci", Source: &launcherapi.Disk_CloudInitNoCloud{CloudInitNoCloud: &launcherapi.CloudInitNoCloudSource{MetaData: `{"instance-id":"vm.ns","local-hostname":"vm"}`}}},
		},
		AccessCredentials: []*launcherapi.AccessCredential{
			{Dir: keys, Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{NoCloud: true}}},
			{Dir: agentOnly, Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{GuestAgentUsers: []string{"root"}}}},
		},
	}
	out, err := WithSeedKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	raw := out.Disks[1].GetCloudInitNoCloud().MetaData
	if !strings.Contains(raw, `"ssh-ed25519 AAA <a&b>@x"`) {
		t.Errorf("keys are not written as they are (the guest's parser reads them raw): %s", raw)
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(raw), &md); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"instance-id": "vm.ns", "local-hostname": "vm",
		"public-keys": map[string]any{"0": "ssh-ed25519 AAA <a&b>@x", "1": "ssh-rsa BBB"}}
	if !reflect.DeepEqual(md, want) {
		t.Errorf("meta-data %v, want %v", md, want)
	}
	if spec.Disks[1].GetCloudInitNoCloud().MetaData != `{"instance-id":"vm.ns","local-hostname":"vm"}` {
		t.Error("the caller's spec was changed")
	}

	// Without noCloud keys the spec is used as it is.
	spec.AccessCredentials = spec.AccessCredentials[1:]
	if out, err := WithSeedKeys(spec); err != nil || out != spec {
		t.Errorf("without noCloud keys: %v, %v", out, err)
	}
}
