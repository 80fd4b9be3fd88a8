package handler

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// testClient is a fake API holding objs, knowing core and kubevirt.io types.
func testClient(t *testing.T, objs ...client.Object) *fake.ClientBuilder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)
}

// testLauncherPod is vmi's running launcher pod on node01.
func testLauncherPod(vmi *v1.VirtualMachineInstance) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name, UID: types.UID("pod-" + vmi.UID),
			Labels: map[string]string{v1.AppLabel: v1.VirtLauncherAppLabelValue, v1.CreatedByLabel: string(vmi.UID)}},
		Spec:   corev1.PodSpec{NodeName: "node01"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// dirPath is st's VM directory, found through its launcher pod as the node agent finds it.
func dirPath(t *testing.T, st *vmState) string {
	t.Helper()
	p, err := st.dir.path(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shortTempDir is a temporary directory with a short path: a socket's path must fit in 108
// bytes, and a pod's VM directory adds about 70 to the kubelet's.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
