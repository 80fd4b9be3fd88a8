package launcherspec

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

func TestAccessCredentialsNameTheirSecretDirectories(t *testing.T) {
	mem := resource.MustParse("128Mi")
	secret := func(n string) *v1.AccessCredentialSecretSource {
		return &v1.AccessCredentialSecretSource{SecretName: n}
	}
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}},
		AccessCredentials: []v1.AccessCredential{
			{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{Source: v1.SSHPublicKeyAccessCredentialSource{Secret: secret("boot-keys")},
				PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}}}},
			{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{Source: v1.SSHPublicKeyAccessCredentialSource{Secret: secret("live-keys")},
				PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{"root"}}}}},
			{UserPassword: &v1.UserPasswordAccessCredential{Source: v1.UserPasswordAccessCredentialSource{Secret: secret("pw")},
				PropagationMethod: v1.UserPasswordAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}}}},
		},
	}}
	env := Env{SecretDirs: map[string]string{"boot-keys": "/s/boot", "live-keys": "/s/live", "pw": "/s/pw"}}
	spec, err := Build(vmi, env)
	if err != nil {
		t.Fatal(err)
	}
	want := []*launcherapi.AccessCredential{
		{Dir: "/s/boot", Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{NoCloud: true}}},
		{Dir: "/s/live", Kind: &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: &launcherapi.SSHPublicKeys{GuestAgentUsers: []string{"root"}}}},
		{Dir: "/s/pw", Kind: &launcherapi.AccessCredential_UserPasswords{UserPasswords: &launcherapi.UserPasswords{}}},
	}
	if len(spec.AccessCredentials) != len(want) {
		t.Fatalf("got %v", spec.AccessCredentials)
	}
	for i := range want {
		if !proto.Equal(spec.AccessCredentials[i], want[i]) {
			t.Errorf("[%d] = %v, want %v", i, spec.AccessCredentials[i], want[i])
		}
	}

	delete(env.SecretDirs, "live-keys")
	_, err = Build(vmi, env)
	if err == nil || !strings.Contains(err.Error(), "spec.accessCredentials[1].sshPublicKey.source.secret.secretName") ||
		!strings.Contains(err.Error(), "the launcher pod mounts no volume of this secret") {
		t.Errorf("a secret the pod does not mount: %v", err)
	}
}

func TestCloudInitFromSecretsNamesTheirDirectories(t *testing.T) {
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}}},
		Volumes: []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
			UserDataSecretRef: &corev1.LocalObjectReference{Name: "ud"}, NetworkData: "version: 2\n"}}}},
	}}
	if !ReadsSecrets(vmi) {
		t.Error("ReadsSecrets")
	}
	spec, err := Build(vmi, Env{SecretDirs: map[string]string{"ud": "/s/ud"}})
	if err != nil {
		t.Fatal(err)
	}
	if ci := spec.Disks[0].GetCloudInitNoCloud(); ci.UserDataDir != "/s/ud" || ci.UserData != "" || ci.NetworkData != "version: 2\n" || ci.NetworkDataDir != "" {
		t.Errorf("seed %v", ci)
	}
	if _, err := Build(vmi, Env{}); err == nil || !strings.Contains(err.Error(), `the launcher pod mounts no volume of secret "ud"`) {
		t.Errorf("an unmounted secret: %v", err)
	}
	if ReadsSecrets(&v1.VirtualMachineInstance{}) {
		t.Error("ReadsSecrets of a VMI without secrets")
	}
}
