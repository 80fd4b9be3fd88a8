package registry

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"sigs.k8s.io/yaml"
)

// writeConfig writes the registry's config.yml (and htpasswd file, with auth) into o.Dir and
// returns the config's path.
func writeConfig(o Options) (string, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	cfg := map[string]any{
		"version": "0.1",
		"log": map[string]any{
			"level":     "warn",
			"accesslog": map[string]any{"disabled": true},
		},
		"storage": map[string]any{
			"filesystem": map[string]any{"rootdirectory": o.Dir},
			"delete":     map[string]any{"enabled": true},
		},
		"http": map[string]any{
			"addr": o.Addr,
			// Signs upload state between requests; one instance needs no stable value.
			"secret":  hex.EncodeToString(secret),
			"headers": map[string]any{"X-Content-Type-Options": []string{"nosniff"}},
		},
	}
	if len(o.Htpasswd) > 0 {
		path := filepath.Join(o.Dir, "htpasswd")
		if err := writeHtpasswd(path, o.Htpasswd); err != nil {
			return "", err
		}
		cfg["auth"] = map[string]any{"htpasswd": map[string]any{"realm": "qvirt", "path": path}}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(o.Dir, "config.yml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// writeHtpasswd writes user:bcrypt-hash lines, the only form the registry accepts.
func writeHtpasswd(path string, users map[string]string) error {
	names := make([]string, 0, len(users))
	for u := range users {
		if u == "" || strings.ContainsAny(u, ":\n") {
			return fmt.Errorf("registry user name %q", u)
		}
		names = append(names, u)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, u := range names {
		hash, err := bcrypt.GenerateFromPassword([]byte(users[u]), bcrypt.DefaultCost)
		if err != nil {
			return fmt.Errorf("hash the password of %s: %w", u, err)
		}
		fmt.Fprintf(&b, "%s:%s\n", u, hash)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
