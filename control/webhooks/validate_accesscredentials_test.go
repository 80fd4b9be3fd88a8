/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func sshKeys(secret string, m v1.SSHPublicKeyAccessCredentialPropagationMethod) v1.AccessCredential {
	ac := v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{PropagationMethod: m}}
	if secret != "" {
		ac.SSHPublicKey.Source.Secret = &v1.AccessCredentialSecretSource{SecretName: secret}
	}
	return ac
}

// withoutNoCloud drops the base spec's cloud-init disk.
func withoutNoCloud(s *v1.VirtualMachineInstanceSpec) {
	s.Domain.Devices.Disks = s.Domain.Devices.Disks[:1]
	s.Volumes = s.Volumes[:1]
}

func TestValidAccessCredentials(t *testing.T) {
	s := baseSpec()
	s.AccessCredentials = []v1.AccessCredential{
		sshKeys("keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}}),
		sshKeys("more-keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{"root", "jdoe"}}}),
		{UserPassword: &v1.UserPasswordAccessCredential{
			Source:            v1.UserPasswordAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "passwords"}},
			PropagationMethod: v1.UserPasswordAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}},
		}},
	}
	if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
		t.Fatalf("refused: %v", errs)
	}
}

func TestValidateAccessCredentials(t *testing.T) {
	noCloud := v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}}
	agent := func(users ...string) v1.SSHPublicKeyAccessCredentialPropagationMethod {
		return v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: users}}
	}
	set := func(acs ...v1.AccessCredential) func(s *v1.VirtualMachineInstanceSpec) {
		return func(s *v1.VirtualMachineInstanceSpec) { s.AccessCredentials = acs }
	}
	runRuleCases(t, []ruleCase{
		{"noCloud without a noCloud volume", nil, func(s *v1.VirtualMachineInstanceSpec) {
			withoutNoCloud(s)
			s.AccessCredentials = []v1.AccessCredential{sshKeys("keys", noCloud)}
		},
			"spec.accessCredentials[0].sshPublicKey.propagationMethod", field.ErrorTypeInvalid,
			"spec.accessCredentials[0] requires a noCloud volume to exist when the noCloud propagationMethod is in use."},
		{"no users", nil, set(sshKeys("keys", agent())),
			"spec.accessCredentials[0].sshPublicKey.propagationMethod.qemuGuestAgent.users", field.ErrorTypeInvalid,
			"requires at least one user to be present in the users list"},
		{"an empty user", nil, set(sshKeys("keys", agent("root", ""))),
			"spec.accessCredentials[0].sshPublicKey.propagationMethod.qemuGuestAgent.users[1]", field.ErrorTypeInvalid, "must not be empty"},
		{"no source", nil, set(sshKeys("", agent("root"))),
			"spec.accessCredentials[0].sshPublicKey.source", field.ErrorTypeInvalid, "spec.accessCredentials[0] must have exactly one source set"},
		{"a bad secret name", nil, set(sshKeys("Keys_1", agent("root"))),
			"spec.accessCredentials[0].sshPublicKey.source.secret.secretName", field.ErrorTypeInvalid, "a lowercase RFC 1123 subdomain"},
		{"no propagation method", nil, set(sshKeys("keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{})),
			"spec.accessCredentials[0].sshPublicKey.propagationMethod", field.ErrorTypeInvalid, "must have exactly one propagationMethod set"},
		{"two propagation methods", nil, func(s *v1.VirtualMachineInstanceSpec) {
			m := agent("root")
			m.NoCloud = &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}
			s.AccessCredentials = []v1.AccessCredential{sshKeys("keys", m)}
		}, "spec.accessCredentials[0].sshPublicKey.propagationMethod", field.ErrorTypeInvalid, "must have exactly one propagationMethod set"},
		{"configDrive", nil, set(sshKeys("keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{ConfigDrive: &v1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}})),
			"spec.accessCredentials[0].sshPublicKey.propagationMethod.configDrive", field.ErrorTypeNotSupported, "qvirt does not support the configDrive propagation method"},
		{"no type", nil, set(v1.AccessCredential{}),
			"spec.accessCredentials[0]", field.ErrorTypeInvalid, "must have exactly one access credential type set"},
		{"two types", nil, func(s *v1.VirtualMachineInstanceSpec) {
			ac := sshKeys("keys", agent("root"))
			ac.UserPassword = &v1.UserPasswordAccessCredential{
				Source:            v1.UserPasswordAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "pw"}},
				PropagationMethod: v1.UserPasswordAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}},
			}
			s.AccessCredentials = []v1.AccessCredential{ac}
		}, "spec.accessCredentials[0]", field.ErrorTypeInvalid, "must have exactly one access credential type set"},
		{"password without a method", nil, set(v1.AccessCredential{UserPassword: &v1.UserPasswordAccessCredential{
			Source: v1.UserPasswordAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "pw"}},
		}}), "spec.accessCredentials[0].userPassword.propagationMethod", field.ErrorTypeInvalid, "must have exactly one propagationMethod set"},
	})
}
