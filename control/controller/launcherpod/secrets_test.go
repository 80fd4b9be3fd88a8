package launcherpod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// TestAccessCredentialSecretsAreMountedOnceReadOnly: the secrets of access credentials and of
// cloud-init data, each once (my-keys serves both), read-only.
func TestAccessCredentialSecretsAreMountedOnceReadOnly(t *testing.T) {
	vmi := testVMI()
	keys := func(secret string) virtv1.AccessCredential {
		return virtv1.AccessCredential{SSHPublicKey: &virtv1.SSHPublicKeyAccessCredential{
			Source: virtv1.SSHPublicKeyAccessCredentialSource{Secret: &virtv1.AccessCredentialSecretSource{SecretName: secret}},
			PropagationMethod: virtv1.SSHPublicKeyAccessCredentialPropagationMethod{
				QemuGuestAgent: &virtv1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{"root"}}},
		}}
	}
	vmi.Spec.AccessCredentials = []virtv1.AccessCredential{
		keys("my-keys"), keys("my.keys.example"), keys("my-keys"),
		{UserPassword: &virtv1.UserPasswordAccessCredential{
			Source: virtv1.UserPasswordAccessCredentialSource{Secret: &virtv1.AccessCredentialSecretSource{SecretName: "passwords"}},
		}},
	}
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, virtv1.Volume{Name: "ci", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
		UserDataSecretRef: &corev1.LocalObjectReference{Name: "user-data"}, NetworkDataSecretRef: &corev1.LocalObjectReference{Name: "my-keys"}}}})
	pod, err := RenderLauncherPod(vmi, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	secretOf := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			t.Errorf("volume name %q: %v", v.Name, errs)
		}
		// Owner and group (the pod's fsGroup, the qemu user's) only.
		if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 {
			t.Errorf("secret %s mode %v, want 0440", v.Secret.SecretName, v.Secret.DefaultMode)
		}
		secretOf[v.Name] = v.Secret.SecretName
	}
	mounted := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		s, ok := secretOf[m.Name]
		if !ok {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s mounted writable", s)
		}
		if _, dup := mounted[s]; dup {
			t.Errorf("secret %s mounted twice", s)
		}
		mounted[s] = m.MountPath
	}
	want := map[string]string{
		"my-keys":         "/var/run/kubevirt-private/secret/my-keys-access-cred",
		"my.keys.example": "/var/run/kubevirt-private/secret/my.keys.example-access-cred",
		"passwords":       "/var/run/kubevirt-private/secret/passwords-access-cred",
		"user-data":       "/var/run/kubevirt-private/secret/user-data-cloud-init",
	}
	if len(mounted) != len(want) {
		t.Errorf("mounted %v, want %v", mounted, want)
	}
	for s, p := range want {
		if mounted[s] != p {
			t.Errorf("secret %s at %q, want %q", s, mounted[s], p)
		}
	}
}
