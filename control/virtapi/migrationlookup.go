package virtapi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
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

// evictionLookup serves the eviction webhook, straight from the API server.
type evictionLookup struct {
	migrationLookup
	kube func() kubernetes.Interface
}

func (l evictionLookup) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod, err := l.kube().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

// MarkEvacuation sets status.evacuationNodeName, which virt-controller turns into a migration
// (or leaves to an external controller).
func (l evictionLookup) MarkEvacuation(ctx context.Context, vmi *v1.VirtualMachineInstance, node string) error {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"evacuationNodeName":%q}}`, node))
	return l.kubevirt().Status().Patch(ctx, vmi.DeepCopy(), patch)
}
