package launcherpod

import (
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

const (
	// AccessCredentialsMountPath holds one directory per secret of the VMI's accessCredentials,
	// named <secret>-access-cred as KubeVirt names them. The node agent finds a secret's
	// directory by the secret's name in the pod spec, not by this path.
	AccessCredentialsMountPath = "/var/run/kubevirt-private/secret"
	// AccessCredentialVolumePrefix starts the pod volume name of each such secret.
	AccessCredentialVolumePrefix = "access-cred-"
)

// accessCredentialVolumes mounts each secret the VMI's accessCredentials and cloud-init volumes
// name, once, read-only into the compute container. A secret volume (rather than the launcher reading the API) keeps
// the launcher without API access, and the kubelet updates the files when the secret changes,
// which the guest agent's propagation follows.
func accessCredentialVolumes(vmi *virtv1.VirtualMachineInstance) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	seen, used := map[string]bool{}, map[string]bool{}
	add := func(secret, dir string) {
		if seen[secret] {
			return
		}
		seen[secret] = true
		name := AccessCredentialVolumePrefix + safeName(secret, validation.DNS1123LabelMaxLength-len(AccessCredentialVolumePrefix), used)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To[int32](0o440)},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path.Join(AccessCredentialsMountPath, dir), ReadOnly: true})
	}
	for _, secret := range accessCredentialSecrets(vmi) {
		add(secret, secret+"-access-cred")
	}
	// Cloud-init data from secrets (cloudInitNoCloud secretRef, networkDataSecretRef), the same
	// way: the launcher reads the files when it writes the seed.
	for _, v := range vmi.Spec.Volumes {
		if ci := v.CloudInitNoCloud; ci != nil {
			for _, ref := range []*corev1.LocalObjectReference{ci.UserDataSecretRef, ci.NetworkDataSecretRef} {
				if ref != nil && ref.Name != "" {
					add(ref.Name, ref.Name+"-cloud-init")
				}
			}
		}
	}
	return vols, mounts
}

// accessCredentialSecrets are the secret names of the VMI's accessCredentials, in spec order.
func accessCredentialSecrets(vmi *virtv1.VirtualMachineInstance) []string {
	var out []string
	for _, ac := range vmi.Spec.AccessCredentials {
		switch {
		case ac.SSHPublicKey != nil && ac.SSHPublicKey.Source.Secret != nil:
			out = append(out, ac.SSHPublicKey.Source.Secret.SecretName)
		case ac.UserPassword != nil && ac.UserPassword.Source.Secret != nil:
			out = append(out, ac.UserPassword.Source.Secret.SecretName)
		}
	}
	return out
}
