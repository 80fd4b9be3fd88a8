package virtapi

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// migrationLookup reads a new migration's VMI and its namespace's migrations for the webhook,
// straight from the API server: an in-flight migration created a moment ago must be seen.
type migrationLookup struct {
	kubevirt func() client.Client
}

func (l migrationLookup) VMI(ctx context.Context, namespace, name string) (*v1.VirtualMachineInstance, error) {
	vmi := &v1.VirtualMachineInstance{}
	err := l.kubevirt().Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, vmi)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return vmi, err
}

func (l migrationLookup) Migrations(ctx context.Context, namespace string) ([]v1.VirtualMachineInstanceMigration, error) {
	var list v1.VirtualMachineInstanceMigrationList
	if err := l.kubevirt().List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}
