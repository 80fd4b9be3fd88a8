/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// validateAccessCredentials applies KubeVirt's rules (one type, one source, one propagation
// method, the cloud-init volume a meta-data method needs, users for the guest agent) and refuses
// ConfigDrive, whose volumes qvirt does not run.
func validateAccessCredentials(p *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	hasNoCloud := false
	for _, vol := range spec.Volumes {
		hasNoCloud = hasNoCloud || vol.CloudInitNoCloud != nil
	}
	for i, ac := range spec.AccessCredentials {
		ap := p.Index(i)
		kinds := 0
		if k := ac.SSHPublicKey; k != nil {
			kinds++
			kp := ap.Child("sshPublicKey")
			errs = append(errs, validateCredentialSecret(ap, kp.Child("source"), k.Source.Secret)...)
			methods := 0
			m := k.PropagationMethod
			mp := kp.Child("propagationMethod")
			if m.NoCloud != nil {
				methods++
				if !hasNoCloud {
					errs = append(errs, invalid(mp, nil, "%s requires a noCloud volume to exist when the noCloud propagationMethod is in use.", ap))
				}
			}
			if m.ConfigDrive != nil {
				methods++
				errs = append(errs, unsupported(mp.Child("configDrive"), "the configDrive propagation method (cloudInitConfigDrive volumes)"))
			}
			if m.QemuGuestAgent != nil {
				methods++
				if len(m.QemuGuestAgent.Users) == 0 {
					errs = append(errs, invalid(mp.Child("qemuGuestAgent", "users"), nil, "%s requires at least one user to be present in the users list", ap))
				}
				for j, u := range m.QemuGuestAgent.Users {
					if u == "" {
						errs = append(errs, invalid(mp.Child("qemuGuestAgent", "users").Index(j), u, "a user name must not be empty"))
					}
				}
			}
			if methods != 1 {
				errs = append(errs, invalid(mp, nil, "%s must have exactly one propagationMethod set", ap))
			}
		}
		if pw := ac.UserPassword; pw != nil {
			kinds++
			pp := ap.Child("userPassword")
			errs = append(errs, validateCredentialSecret(ap, pp.Child("source"), pw.Source.Secret)...)
			if pw.PropagationMethod.QemuGuestAgent == nil {
				errs = append(errs, invalid(pp.Child("propagationMethod"), nil, "%s must have exactly one propagationMethod set", ap))
			}
		}
		if kinds != 1 {
			errs = append(errs, invalid(ap, nil, "%s must have exactly one access credential type set", ap))
		}
	}
	return errs
}

// validateCredentialSecret checks the one source there is: a secret the launcher pod mounts.
func validateCredentialSecret(ap, sp *field.Path, s *v1.AccessCredentialSecretSource) field.ErrorList {
	if s == nil {
		return field.ErrorList{invalid(sp, nil, "%s must have exactly one source set", ap)}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(s.SecretName) {
		errs = append(errs, invalid(sp.Child("secret", "secretName"), s.SecretName, "%s", msg))
	}
	return errs
}
