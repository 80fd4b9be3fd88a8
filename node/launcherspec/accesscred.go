package launcherspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// accessCredentials tells the launcher where each credential's secret appears in its container
// and where its content goes.
func accessCredentials(spec *v1.VirtualMachineInstanceSpec, env Env) ([]*launcherapi.AccessCredential, field.ErrorList) {
	var out []*launcherapi.AccessCredential
	var errs field.ErrorList
	root := field.NewPath("spec", "accessCredentials")
	for i, ac := range spec.AccessCredentials {
		p := root.Index(i)
		var secret *v1.AccessCredentialSecretSource
		lc := &launcherapi.AccessCredential{}
		switch {
		case ac.SSHPublicKey != nil:
			p, secret = p.Child("sshPublicKey", "source", "secret", "secretName"), ac.SSHPublicKey.Source.Secret
			keys := &launcherapi.SSHPublicKeys{NoCloud: ac.SSHPublicKey.PropagationMethod.NoCloud != nil}
			if ga := ac.SSHPublicKey.PropagationMethod.QemuGuestAgent; ga != nil {
				keys.GuestAgentUsers = append([]string(nil), ga.Users...)
			}
			lc.Kind = &launcherapi.AccessCredential_SshPublicKeys{SshPublicKeys: keys}
		case ac.UserPassword != nil:
			p, secret = p.Child("userPassword", "source", "secret", "secretName"), ac.UserPassword.Source.Secret
			lc.Kind = &launcherapi.AccessCredential_UserPasswords{UserPasswords: &launcherapi.UserPasswords{}}
		default:
			errs = append(errs, field.Required(p, "an sshPublicKey or a userPassword"))
			continue
		}
		if secret == nil {
			errs = append(errs, field.Required(p, "a secret"))
			continue
		}
		dir, ok := env.SecretDirs[secret.SecretName]
		if !ok {
			errs = append(errs, field.Invalid(p, secret.SecretName, "the launcher pod mounts no volume of this secret"))
			continue
		}
		lc.Dir = dir
		out = append(out, lc)
	}
	return out, errs
}

// SecretDirs is where each secret volume of a launcher pod appears in its compute container, by
// secret name: Env.SecretDirs of the VM it runs.
func SecretDirs(pod *corev1.Pod) map[string]string {
	byVolume := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			byVolume[v.Name] = v.Secret.SecretName
		}
	}
	dirs := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if c.Name != ComputeContainer {
			continue
		}
		for _, m := range c.VolumeMounts {
			if s, ok := byVolume[m.Name]; ok && m.SubPath == "" {
				dirs[s] = m.MountPath
			}
		}
	}
	return dirs
}

// ReadsSecrets reports a VMI whose launcher reads secrets: access credentials, cloud-init data.
func ReadsSecrets(vmi *v1.VirtualMachineInstance) bool {
	if len(vmi.Spec.AccessCredentials) > 0 {
		return true
	}
	for _, v := range vmi.Spec.Volumes {
		if ci := v.CloudInitNoCloud; ci != nil && (ci.UserDataSecretRef != nil && ci.UserDataSecretRef.Name != "" || ci.NetworkDataSecretRef != nil && ci.NetworkDataSecretRef.Name != "") {
			return true
		}
	}
	return false
}

// ComputeContainer is KubeVirt's name of the launcher pod's container that runs the VM.
const ComputeContainer = "compute"
