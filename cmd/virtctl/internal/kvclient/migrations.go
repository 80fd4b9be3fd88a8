package kvclient

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const migrations = "virtualmachineinstancemigrations"

// Migrations lists the migrations of one VMI, found by the label the API server's defaulting
// webhook puts on every migration.
func (c *Client) Migrations(ctx context.Context, ns, vmi string) ([]v1.VirtualMachineInstanceMigration, error) {
	var list v1.VirtualMachineInstanceMigrationList
	err := c.kv.Get().Namespace(ns).Resource(migrations).
		Param("labelSelector", v1.MigrationSelectorLabel+"=="+vmi).
		Do(ctx).Into(&list)
	if err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, m := range list.Items {
		if m.Spec.VMIName == vmi {
			out = append(out, m)
		}
	}
	return out, nil
}

// DeleteMigration deletes (and so cancels) a migration.
func (c *Client) DeleteMigration(ctx context.Context, ns, name string, dryRun []string) error {
	b, err := json.Marshal(metav1.DeleteOptions{
		TypeMeta: metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"},
		DryRun:   dryRun,
	})
	if err != nil {
		return err
	}
	return c.kv.Delete().Namespace(ns).Resource(migrations).Name(name).Body(b).Do(ctx).Error()
}

// MigrationFinished tells a migration that can no longer be cancelled.
func MigrationFinished(m *v1.VirtualMachineInstanceMigration) bool {
	return m.Status.Phase == v1.MigrationSucceeded || m.Status.Phase == v1.MigrationFailed
}
