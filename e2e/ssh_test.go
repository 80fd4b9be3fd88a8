package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// sshKey writes a new ed25519 private key into dir and returns its path and its authorized_keys
// line.
func sshKey(t *testing.T, dir, name string) (path, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + name
}

// sshVMManifest is the tiny VM with a NoCloud disk whose user-data is Secret ssh-user-data's, and
// two access credentials: bootSecret's keys
// through the NoCloud meta-data (the guest gives them to root), liveSecret's through the guest
// agent for the guest's user qvirt. The agent makes its keys the whole of the user's
// authorized_keys, as KubeVirt's does, so the two go to different users.
func sshVMManifest(name, bootSecret, liveSecret string) string {
	m := vmManifest(name, "", "masquerade")
	m = strings.Replace(m, `          - name: rootdisk
            disk: {bus: virtio}
`, `          - name: rootdisk
            disk: {bus: virtio}
          - name: cloudinit
            disk: {bus: virtio}
`, 1)
	m = strings.Replace(m, `      volumes:
`, `      accessCredentials:
      - sshPublicKey:
          source: {secret: {secretName: `+bootSecret+`}}
          propagationMethod: {noCloud: {}}
      - sshPublicKey:
          source: {secret: {secretName: `+liveSecret+`}}
          propagationMethod: {qemuGuestAgent: {users: [qvirt]}}
      volumes:
      - name: cloudinit
        cloudInitNoCloud: {secretRef: {name: ssh-user-data}}
`, 1)
	return m
}

// TestSSHAndSCPWithAccessCredentials: the cloud-init user-data and the keys come from secrets,
// one key through the NoCloud meta-data at boot, one through the guest agent
// (AccessCredentialsSynchronized). virtctl ssh logs in with either key through the local OpenSSH
// client and virtctl port-forward, runs a command, and refuses a key no secret holds; virtctl scp
// copies a file into the guest and back, byte for byte. Replacing the guest agent's key in its
// secret replaces it in the guest.
func TestSSHAndSCPWithAccessCredentials(t *testing.T) {
	kubeconfig, bin, kvc := cluster(t)
	c := localStack(t)
	const name = "sshvm"
	dir := t.TempDir()
	bootKey, bootPub := sshKey(t, dir, "boot-key")
	liveKey, livePub := sshKey(t, dir, "live-key")
	strangerKey, _ := sshKey(t, dir, "stranger-key")
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	for secret, data := range map[string]map[string]string{
		"ssh-boot-keys": {"key": bootPub + "\n"}, "ssh-live-keys": {"key": livePub + "\n"},
		"ssh-user-data": {"userdata": "#!/bin/sh\necho from-secret-$((6*7)) >/run/user-data-marker\n"},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: secret}, StringData: data}
		_ = kvc.Delete(ctx, s)
		if err := kvc.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kvc.Delete(context.Background(), s) })
	}
	startVM(t, c, sshVMManifest(name, "ssh-boot-keys", "ssh-live-keys"))
	t.Cleanup(func() {
		_ = kvc.Delete(context.Background(), &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	})
	waitCondition(t, ctx, c, name, v1.VirtualMachineInstanceAccessCredentialsSynchronized, corev1.ConditionTrue)

	opts := []string{"-t", "-o StrictHostKeyChecking=no", "-t", "-o UserKnownHostsFile=/dev/null", "-t", "-o BatchMode=yes", "-t", "-o LogLevel=ERROR"}
	sshRun := func(user, key, command string) (string, string, int) {
		return virtctl(t, kubeconfig, bin, append([]string{"ssh", user + "@vmi/" + name, "-i", key, "-c", command}, opts...)...)
	}
	// The SSH server starts with the guest; the first answer may take a moment under emulation.
	var out, errOut string
	var code int
	if err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(context.Context) (bool, error) {
		out, errOut, code = sshRun("root", bootKey, "cat /etc/hostname")
		return code == 0, nil
	}); err != nil {
		t.Fatalf("ssh with the noCloud key: exit %d, %q %q", code, out, errOut)
	}
	if strings.TrimSpace(out) != name {
		t.Errorf("ssh with the noCloud key ran cat /etc/hostname: %q", out)
	}
	// The user-data came from its secret too (it runs once the guest has booted).
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		out, errOut, code = sshRun("root", bootKey, "cat /run/user-data-marker")
		return strings.TrimSpace(out) == "from-secret-42", nil
	}); err != nil {
		t.Errorf("the user-data of the secret did not run: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = sshRun("qvirt", liveKey, "id -u; cat ~/.ssh/authorized_keys"); code != 0 || !strings.HasPrefix(out, "1000\n") || !strings.Contains(out, livePub) {
		t.Errorf("ssh with the guest agent's key: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = sshRun("root", strangerKey, "true"); code == 0 || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("ssh with a key no secret holds: exit %d, %q %q", code, out, errOut)
	}

	// scp both ways, through the guest's SFTP server.
	payload := make([]byte, 256<<10)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	up := filepath.Join(dir, "up.bin")
	if err := os.WriteFile(up, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	scp := func(key string, args ...string) {
		t.Helper()
		if out, errOut, code := virtctl(t, kubeconfig, bin, append(append([]string{"scp", "-i", key}, opts...), args...)...); code != 0 {
			t.Fatalf("virtctl scp %v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	scp(bootKey, up, "root@vmi/"+name+":/root/up.bin")
	// Its size and first bytes, as the guest reads them.
	want := "262144\n" + hex.EncodeToString(payload[:16])
	if out, errOut, code = sshRun("root", bootKey, "wc -c </root/up.bin; dd if=/root/up.bin bs=16 count=1 2>/dev/null | od -An -tx1 | tr -d ' \\n'"); code != 0 ||
		strings.TrimSpace(out) != want {
		t.Errorf("the uploaded file in the guest: exit %d, %q %q", code, out, errOut)
	}
	down := filepath.Join(dir, "down.bin")
	scp(bootKey, "root@vmi/"+name+":/root/up.bin", down)
	got, err := os.ReadFile(down)
	if err != nil || string(got) != string(payload) {
		t.Errorf("the file copied back differs: %d bytes, %v", len(got), err)
	}

	// Into the home of the guest agent's user, with its key.
	scp(liveKey, up, "qvirt@vmi/"+name+":")
	if out, errOut, code = sshRun("qvirt", liveKey, "wc -c <up.bin"); code != 0 || strings.TrimSpace(out) != "262144" {
		t.Errorf("the file copied into qvirt's home: exit %d, %q %q", code, out, errOut)
	}

	// The guest agent follows the secret: once the kubelet has updated the pod's copy (up to its
	// sync period, a minute by default), the new key logs in and the old one no longer does.
	newKey, newPub := sshKey(t, dir, "rotated-key")
	live := &corev1.Secret{}
	if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ssh-live-keys"}, live); err != nil {
		t.Fatal(err)
	}
	live.Data = map[string][]byte{"key": []byte(newPub + "\n")}
	if err := kvc.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 3*time.Second, true, func(context.Context) (bool, error) {
		out, errOut, code = sshRun("qvirt", newKey, "true")
		return code == 0, nil
	}); err != nil {
		t.Fatalf("the rotated key never logged in: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code = sshRun("qvirt", liveKey, "true"); code == 0 {
		t.Errorf("the replaced key still logs in: %q %q", out, errOut)
	}
}
