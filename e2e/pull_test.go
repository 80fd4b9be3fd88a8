package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// privateVMManifest boots the tiny guest from the registry that asks for credentials, with the
// containerDisk's imagePullSecret set to secret (none when empty).
func privateVMManifest(name, secret string) string {
	m := vmManifest(name, e2eNodes[0], "masquerade")
	disk := "containerDisk: {image: localhost:5000/qvirt/tiny-disk:latest}"
	private := "containerDisk: {image: localhost:5001/" + localcluster.PrivateTinyDiskImage + ", imagePullPolicy: Always"
	if secret != "" {
		private += ", imagePullSecret: " + secret
	}
	return strings.Replace(m, disk, private+"}", 1)
}

// TestContainerDiskFromARegistryWithCredentials: the kubelet pulls a containerDisk image volume with
// the VMI's imagePullSecret; without the secret the pull is refused and the VM says so.
func TestContainerDiskFromARegistryWithCredentials(t *testing.T) {
	c := localStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	auth := base64.StdEncoding.EncodeToString([]byte(localcluster.PrivateUser + ":" + localcluster.PrivatePassword))
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{"localhost:5001": map[string]string{"auth": auth}}})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private-registry", Namespace: "default"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
	if _, err := c.Kube.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	t.Run("with the secret it runs", func(t *testing.T) {
		m := privateVMManifest("private-ok", secret.Name)
		startVM(t, c, m)
		vmi := getVMI(t, c, "private-ok")
		pod := launcherPod(t, c, vmi)
		if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != secret.Name {
			t.Errorf("launcher pod imagePullSecrets %v", pod.Spec.ImagePullSecrets)
		}
		ws := stream(t, c, "virtualmachineinstances/private-ok/console")
		send(t, ws, "\n")
		expect(t, ws, "qvirt# ", 60*time.Second)
	})

	t.Run("without it the VM reports the refused pull", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "vm.yaml")
		if err := os.WriteFile(f, []byte(privateVMManifest("private-denied", "")), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := c.K8s.Kubectl("apply", "-f", f).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		defer c.K8s.Kubectl("delete", "-f", f, "--wait=false").Run() //nolint:errcheck
		var status, message string
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			vm := &v1.VirtualMachine{}
			if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: "private-denied"}, vm); err != nil {
				return false, nil
			}
			status = string(vm.Status.PrintableStatus)
			vmi := &v1.VirtualMachineInstance{}
			if err := kv(t, c).Get(ctx, client.ObjectKey{Namespace: "default", Name: "private-denied"}, vmi); err == nil {
				for _, cond := range vmi.Status.Conditions {
					if cond.Type == "Synchronized" && cond.Status == corev1.ConditionFalse {
						message = cond.Reason + ": " + cond.Message
					}
				}
			}
			return (status == "ErrImagePull" || status == "ImagePullBackOff") && message != "", nil
		})
		if err != nil {
			t.Fatalf("VM status %q, VMI condition %q: want ErrImagePull or ImagePullBackOff with the reason", status, message)
		}
		t.Logf("VM status %s; VMI condition %s", status, message)
		if !strings.Contains(message, "localhost:5001/"+localcluster.PrivateTinyDiskImage) {
			t.Errorf("the condition does not name the image: %q", message)
		}
	})
}
