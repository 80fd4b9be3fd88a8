package v1

// Access credentials put SSH public keys and user passwords from secrets into the guest, as
// KubeVirt's: through the cloud-init NoCloud meta-data at boot, or through the guest agent while
// the VM runs (which follows changes of the secret).

// AccessCredential is one credential; exactly one member is set.
type AccessCredential struct {
	// +optional
	SSHPublicKey *SSHPublicKeyAccessCredential `json:"sshPublicKey,omitempty"`
	// +optional
	UserPassword *UserPasswordAccessCredential `json:"userPassword,omitempty"`
}

// AccessCredentialSecretSource names a secret in the VMI's namespace.
type AccessCredentialSecretSource struct {
	SecretName string `json:"secretName"`
}

// SSHPublicKeyAccessCredential: public keys (every value of the secret) and how they reach the guest.
type SSHPublicKeyAccessCredential struct {
	Source            SSHPublicKeyAccessCredentialSource            `json:"source"`
	PropagationMethod SSHPublicKeyAccessCredentialPropagationMethod `json:"propagationMethod"`
}

// SSHPublicKeyAccessCredentialSource is where the keys come from; exactly one member is set.
type SSHPublicKeyAccessCredentialSource struct {
	// +optional
	Secret *AccessCredentialSecretSource `json:"secret,omitempty"`
}

// SSHPublicKeyAccessCredentialPropagationMethod is how the keys reach the guest; exactly one
// member is set.
type SSHPublicKeyAccessCredentialPropagationMethod struct {
	// +optional
	ConfigDrive *ConfigDriveSSHPublicKeyAccessCredentialPropagation `json:"configDrive,omitempty"`
	// +optional
	NoCloud *NoCloudSSHPublicKeyAccessCredentialPropagation `json:"noCloud,omitempty"`
	// +optional
	QemuGuestAgent *QemuGuestAgentSSHPublicKeyAccessCredentialPropagation `json:"qemuGuestAgent,omitempty"`
}

// ConfigDriveSSHPublicKeyAccessCredentialPropagation puts the keys in the ConfigDrive meta-data.
type ConfigDriveSSHPublicKeyAccessCredentialPropagation struct{}

// NoCloudSSHPublicKeyAccessCredentialPropagation puts the keys in the NoCloud meta-data
// (public-keys).
type NoCloudSSHPublicKeyAccessCredentialPropagation struct{}

// QemuGuestAgentSSHPublicKeyAccessCredentialPropagation writes the keys to each user's
// authorized_keys through the guest agent.
type QemuGuestAgentSSHPublicKeyAccessCredentialPropagation struct {
	// +listType=set
	Users []string `json:"users"`
}

// UserPasswordAccessCredential: passwords (the secret's keys are user names) and how they reach
// the guest.
type UserPasswordAccessCredential struct {
	Source            UserPasswordAccessCredentialSource            `json:"source"`
	PropagationMethod UserPasswordAccessCredentialPropagationMethod `json:"propagationMethod"`
}

// UserPasswordAccessCredentialSource is where the passwords come from; exactly one member is set.
type UserPasswordAccessCredentialSource struct {
	// +optional
	Secret *AccessCredentialSecretSource `json:"secret,omitempty"`
}

// UserPasswordAccessCredentialPropagationMethod is how the passwords reach the guest.
type UserPasswordAccessCredentialPropagationMethod struct {
	// +optional
	QemuGuestAgent *QemuGuestAgentUserPasswordAccessCredentialPropagation `json:"qemuGuestAgent,omitempty"`
}

// QemuGuestAgentUserPasswordAccessCredentialPropagation sets the passwords through the guest agent.
type QemuGuestAgentUserPasswordAccessCredentialPropagation struct{}
