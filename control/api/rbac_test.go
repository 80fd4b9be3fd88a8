package api

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// clusterRoles reads the ClusterRoles of deploy/rbac.yaml by name.
func clusterRoles(t *testing.T) map[string]rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile("../../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]rbacv1.ClusterRole{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "ClusterRole" {
			roles[r.Name] = r
		}
	}
	return roles
}

func grants(r rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, rule := range r.Rules {
		if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
			return true
		}
	}
	return false
}

// TestRolesGrantEverySubresource: the user-facing roles of deploy/ grant what discovery lists,
// as KubeVirt's do: every update subresource in both kubevirt.io:edit and kubevirt.io:admin,
// every get subresource in kubevirt.io:edit or kubevirt.io:view.
func TestRolesGrantEverySubresource(t *testing.T) {
	roles := clusterRoles(t)
	edit, admin, view := roles["kubevirt.io:edit"], roles["kubevirt.io:admin"], roles["kubevirt.io:view"]
	if edit.Name == "" || admin.Name == "" || view.Name == "" {
		t.Fatalf("deploy/rbac.yaml lacks the user roles: %v", roles)
	}
	for _, sub := range subresources {
		switch sub.verb {
		case "update":
			for _, r := range []rbacv1.ClusterRole{edit, admin} {
				if !grants(r, GroupName, sub.name, "update") {
					t.Errorf("%s does not grant update on %s", r.Name, sub.name)
				}
			}
		case "get":
			if !grants(edit, GroupName, sub.name, "get") && !grants(view, GroupName, sub.name, "get") {
				t.Errorf("neither kubevirt.io:edit nor kubevirt.io:view grants get on %s", sub.name)
			}
		default:
			t.Errorf("%s: verb %q", sub.name, sub.verb)
		}
	}
	// memorydump reads the claim as virt-api.
	if !grants(roles["kubevirt-apiserver"], "", "persistentvolumeclaims", "get") {
		t.Error("virt-api may not read persistentvolumeclaims")
	}
}

// TestDiscoveryListsTheVolumeSubresources: the hotplug and memory dump subresources are
// advertised with the verb their routes answer.
func TestDiscoveryListsTheVolumeSubresources(t *testing.T) {
	got := map[string][]string{}
	for _, r := range apiResourceList().APIResources {
		got[r.Name] = r.Verbs
	}
	for _, name := range []string{"virtualmachineinstances/addvolume", "virtualmachineinstances/removevolume",
		"virtualmachines/addvolume", "virtualmachines/removevolume", "virtualmachines/memorydump", "virtualmachines/removememorydump"} {
		if v := got[name]; len(v) != 1 || v[0] != "update" {
			t.Errorf("%s: verbs %v", name, v)
		}
	}
	if v := got["virtualmachineinstances/console"]; len(v) != 1 || v[0] != "get" {
		t.Errorf("console: verbs %v", v)
	}
}
