package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestLocalStorageProvisionsDefaultClaims is the local cluster's storage (deploy/storage/, not part
// of qvirt): a claim that names no storage class gets the default one, local-path-provisioner makes
// it a directory on the node the consuming pod runs on, and deleting the claim removes the volume
// and its directory (reclaimPolicy Delete).
func TestLocalStorageProvisionsDefaultClaims(t *testing.T) {
	c := localStack(t)
	kube := c.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("storage-%d", os.Getpid()%10000)}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})

	fs := corev1.PersistentVolumeFilesystem
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns.Name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &fs,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")},
			},
		},
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims(ns.Name).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const content = "written-by-the-pod"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns.Name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "writer",
				Image:           "localhost:5000/" + localcluster.LocalPathHelperImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", "echo " + content + " > /data/hello && sync && cat /data/hello"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
			}}},
		},
	}
	if _, err := kube.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = waitPodDone(t, ctx, kube, ns.Name, pod.Name)
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("writer pod ended %s: %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	}

	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns.Name).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "local-path" {
		t.Fatalf("claim %s, storage class %v; want Bound with the default class local-path", pvc.Status.Phase, pvc.Spec.StorageClassName)
	}
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.HostPath == nil || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Fatalf("volume %s: source %+v, reclaim policy %s; want a hostPath on the node, Delete", pv.Name, pv.Spec.PersistentVolumeSource, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	dir := c.NodeKubeletPath(pod.Spec.NodeName, pv.Spec.HostPath.Path)
	if dir == "" {
		t.Fatalf("volume %s at %s on %s is not under the node's /var/lib/kubelet", pv.Name, pv.Spec.HostPath.Path, pod.Spec.NodeName)
	}
	got, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil || strings.TrimSpace(string(got)) != content {
		t.Fatalf("the pod's file on node %s (%s): %q, %v", pod.Spec.NodeName, dir, got, err)
	}
	t.Logf("claim %s bound to %s, class local-path, directory %s on %s", pvc.Name, pv.Name, dir, pod.Spec.NodeName)

	// The claim is in use until its pod is gone (pvc-protection).
	if err := kube.CoreV1().Pods(ns.Name).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().PersistentVolumeClaims(ns.Name).Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, statErr := os.Stat(dir)
		return os.IsNotExist(statErr), nil
	})
	if err != nil {
		_, statErr := os.Stat(dir)
		t.Fatalf("after deleting the claim, volume %s or its directory %s remains (stat: %v): %v\n%s", pv.Name, dir, statErr, err, storageEvents(kube))
	}
}

// waitPodDone waits for a pod to succeed or fail, and says what held it up when it does neither.
func waitPodDone(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		phase := corev1.PodPhase("unknown")
		if pod != nil {
			phase = pod.Status.Phase
		}
		t.Fatalf("pod %s/%s still %s: %v\n%s", ns, name, phase, err, storageEvents(kube))
	}
	return pod
}

// storageEvents are the events of the test's and the provisioner's namespaces, for failures.
func storageEvents(kube kubernetes.Interface) string {
	var b strings.Builder
	events, err := kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Namespace, "storage-") || e.Namespace == "local-path-storage" || e.InvolvedObject.Kind == "PersistentVolume" {
			fmt.Fprintf(&b, "%s %s/%s %s: %s\n", e.Namespace, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}
