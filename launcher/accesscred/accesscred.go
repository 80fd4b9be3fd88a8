// Package accesscred reads the VMI's access credentials from the secret volumes of the launcher
// pod and says what goes into the guest: public keys for the NoCloud meta-data at boot, and the
// keys and passwords the guest agent applies while the VM runs.
package accesscred

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// Desired is what the guest agent is to apply.
type Desired struct {
	// AuthorizedKeys is the whole authorized_keys of each user.
	AuthorizedKeys map[string][]string
	// Passwords is each user's password.
	Passwords map[string]string
}

// Empty reports whether nothing goes through the guest agent.
func (d Desired) Empty() bool { return len(d.AuthorizedKeys) == 0 && len(d.Passwords) == 0 }

// ThroughGuestAgent reports whether any of creds is applied by the guest agent.
func ThroughGuestAgent(creds []*launcherapi.AccessCredential) bool {
	for _, c := range creds {
		if c.GetUserPasswords() != nil || len(c.GetSshPublicKeys().GetGuestAgentUsers()) > 0 {
			return true
		}
	}
	return false
}

// ReadDesired reads the secret files of the guest agent's credentials. A user named by several
// credentials gets the keys of all of them, in their order.
func ReadDesired(creds []*launcherapi.AccessCredential) (Desired, error) {
	d := Desired{AuthorizedKeys: map[string][]string{}, Passwords: map[string]string{}}
	for _, c := range creds {
		switch {
		case len(c.GetSshPublicKeys().GetGuestAgentUsers()) > 0:
			keys, err := readKeys(c.Dir)
			if err != nil {
				return Desired{}, err
			}
			for _, u := range c.GetSshPublicKeys().GetGuestAgentUsers() {
				d.AuthorizedKeys[u] = append(d.AuthorizedKeys[u], keys...)
			}
		case c.GetUserPasswords() != nil:
			files, err := secretFiles(c.Dir)
			if err != nil {
				return Desired{}, err
			}
			for name, content := range files {
				d.Passwords[name] = strings.TrimRight(content, "\r\n")
			}
		}
	}
	return d, nil
}

// WithSeedKeys returns spec with the public keys of its noCloud credentials in the meta-data of
// every cloud-init disk ("public-keys", numbered from 0 as KubeVirt numbers them); spec itself is
// not changed.
func WithSeedKeys(spec *launcherapi.VMSpec) (*launcherapi.VMSpec, error) {
	var keys []string
	for _, c := range spec.GetAccessCredentials() {
		if !c.GetSshPublicKeys().GetNoCloud() {
			continue
		}
		k, err := readKeys(c.Dir)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k...)
	}
	if len(keys) == 0 {
		return spec, nil
	}
	out := proto.Clone(spec).(*launcherapi.VMSpec)
	for _, d := range out.GetDisks() {
		ci := d.GetCloudInitNoCloud()
		if ci == nil {
			continue
		}
		md, err := addPublicKeys(ci.MetaData, keys)
		if err != nil {
			return nil, fmt.Errorf("disk %s: meta-data: %w", d.Name, err)
		}
		ci.MetaData = md
	}
	return out, nil
}

// addPublicKeys adds keys to JSON meta-data.
func addPublicKeys(metaData string, keys []string) (string, error) {
	m := map[string]any{}
	if strings.TrimSpace(metaData) != "" {
		if err := json.Unmarshal([]byte(metaData), &m); err != nil {
			return "", err
		}
	}
	pk := map[string]string{}
	for i, k := range keys {
		pk[strconv.Itoa(i)] = k
	}
	m["public-keys"] = pk
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return b.String(), nil
}

// readKeys reads the public keys of a secret: every non-empty line of every file, files in name
// order.
func readKeys(dir string) ([]string, error) {
	files, err := secretFiles(dir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for _, line := range strings.Split(files[name], "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				keys = append(keys, l)
			}
		}
	}
	return keys, nil
}

// secretFiles reads a secret volume: each key of the secret is a file. The kubelet's own entries
// (..data and the timestamped directory it swaps atomically) are skipped.
func secretFiles(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("access credential secret: %w", err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("access credential secret: %w", err)
		}
		files[e.Name()] = string(b)
	}
	return files, nil
}
