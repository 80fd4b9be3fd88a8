package virtapi_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/e2e/stack"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
)

func startStack(t *testing.T) *stack.Stack {
	t.Helper()
	controlplane.RequireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{Dir: t.TempDir(), Root: testenv.RepoRoot(t), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func kubectl(t *testing.T, s *stack.Stack, args ...string) string {
	t.Helper()
	out, err := s.Cluster.Kubectl(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestVirtAPIOnARealAPIServer(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("discovery through the aggregation layer", func(t *testing.T) {
		var l metav1.APIResourceList
		if err := json.Unmarshal([]byte(kubectl(t, s, "get", "--raw", "/apis/subresources.kubevirt.io/v1/")), &l); err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, r := range l.APIResources {
			names[r.Name] = true
		}
		for _, want := range []string{"virtualmachines/start", "virtualmachines/stop", "virtualmachineinstances/console", "virtualmachineinstances/vnc"} {
			if !names[want] {
				t.Errorf("%s missing from %v", want, names)
			}
		}
		var v struct{ GitVersion string }
		if err := json.Unmarshal([]byte(kubectl(t, s, "get", "--raw", "/apis/subresources.kubevirt.io/v1/version")), &v); err != nil || !strings.HasPrefix(v.GitVersion, "v1.") {
			t.Errorf("version %q %v", v.GitVersion, err)
		}
	})

	t.Run("RBAC decides who may start a VM", func(t *testing.T) {
		vm := `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: rbac-vm, namespace: default}
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        devices: {}
        memory: {guest: 128Mi}
`
		f := filepath.Join(t.TempDir(), "vm.yaml")
		os.WriteFile(f, []byte(vm), 0o644)
		kubectl(t, s, "apply", "-f", f)

		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "vm-starter", Namespace: "default"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"subresources.kubevirt.io"}, Resources: []string{"virtualmachines/start"}, Verbs: []string{"update"}}}}
		if _, err := s.Kube.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-starts", Namespace: "default"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "vm-starter"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}}}
		if _, err := s.Kube.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		put := func(user string) (int, string) {
			cfg, _, err := s.Cluster.UserConfig(user)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := rest.UnversionedRESTClientFor(withCodec(cfg))
			if err != nil {
				t.Fatal(err)
			}
			var code int
			body, err := rc.Put().AbsPath("/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/rbac-vm/start").Do(ctx).StatusCode(&code).Raw()
			if err != nil && body == nil {
				body = []byte(err.Error())
			}
			return code, string(body)
		}
		// RBAC propagates within a second or so; retry briefly for the allowed user.
		if code, body := put("bob"); code != 403 {
			t.Errorf("bob: %d %s", code, body)
		}
		var code int
		var body string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if code, body = put("alice"); code == 202 {
				break
			}
		}
		if code != 202 {
			t.Fatalf("alice: %d %s", code, body)
		}
		c := kvClient(t, s)
		got := &v1.VirtualMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "rbac-vm"}, got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.RunStrategy == nil || *got.Spec.RunStrategy != v1.RunStrategyAlways {
			t.Errorf("runStrategy after start: %v", got.Spec.RunStrategy)
		}
	})

	t.Run("serving certificate replaced on disk", func(t *testing.T) {
		serial := func() string {
			conn, err := tls.Dial("tcp", s.VirtAPI.String(), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		before := serial()
		kp, err := s.CA.Sign(pki.Request{CommonName: "virt-api-rotated", Server: true, DNSNames: []string{"virt-api.kubevirt.svc", "localhost"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := kp.Write(filepath.Join(s.Dir, "qvirt-pki"), "virt-api-serving"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for serial() == before {
			if time.Now().After(deadline) {
				t.Fatal("the new certificate was never served")
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The aggregation layer trusts the same CA: requests keep working.
		kubectl(t, s, "get", "--raw", "/apis/subresources.kubevirt.io/v1/version")
	})
}

func withCodec(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	return c
}

func kvClient(t *testing.T, s *stack.Stack) client.Client {
	scheme := runtime.NewScheme()
	v1.AddToScheme(scheme)
	c, err := client.New(s.Cluster.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
