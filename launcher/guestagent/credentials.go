package guestagent

import (
	"context"
	"encoding/base64"
)

// SetAuthorizedKeys makes keys the whole of user's ~/.ssh/authorized_keys in the guest
// (qemu-ga creates the directory and the file with the user's ownership), as KubeVirt replaces
// the file's content with the secret's keys.
func (c *Client) SetAuthorizedKeys(ctx context.Context, user string, keys []string) error {
	if keys == nil {
		keys = []string{}
	}
	return c.Execute(ctx, "guest-ssh-add-authorized-keys", map[string]any{
		"username": user, "keys": keys, "reset": true,
	}, nil)
}

// SetUserPassword sets user's password in the guest; password is the plain text.
func (c *Client) SetUserPassword(ctx context.Context, user, password string) error {
	return c.Execute(ctx, "guest-set-user-password", map[string]any{
		"username": user, "password": base64.StdEncoding.EncodeToString([]byte(password)), "crypted": false,
	}, nil)
}
