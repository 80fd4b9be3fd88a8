package virtapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/virtapi"
	"github.com/qvirt/qvirt/e2e/stack"
	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
)

// The hotplug and memory-dump subresources patch VMIs and VM status as virt-api's own service
// account, which only deploy/'s RBAC lets them do and only its privileges get past the webhooks.
// So here virt-api runs under that identity (e2e/stack runs it as the cluster admin), behind the
// aggregation layer and its own webhooks, and users reach it through kubevirt.io:edit.

const saPrefix = "system:serviceaccount:kubevirt:"

type hotplugCluster struct {
	cl *controlplane.Cluster
	// admin creates objects; controller writes VMI status, as virt-controller does.
	admin, controller client.Client
}

func startHotplugCluster(t *testing.T) *hotplugCluster {
	t.Helper()
	dir, root := t.TempDir(), testenv.RepoRoot(t)
	cl := controlplane.ForTest(t, controlplane.Options{Dir: filepath.Join(dir, "cluster"), Log: testr.New(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crds := filepath.Join(root, "deploy", "crds")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", crds},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", crds},
		{"create", "namespace", stack.Namespace},
		{"apply", "--server-side", "-f", filepath.Join(root, "deploy", "rbac.yaml")},
		{"create", "rolebinding", "alice-edits", "--namespace=default", "--clusterrole=kubevirt.io:edit", "--user=alice"},
	} {
		cl.MustKubectl(t, args...)
	}

	ca, err := pki.NewCA("qvirt-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(dir, "qvirt-pki")
	caFile := filepath.Join(pkiDir, "ca.crt")
	if err := pki.WriteFileAtomic(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	serving, _ := ca.Sign(pki.Request{CommonName: "virt-api", Server: true,
		DNSNames: []string{"virt-api.kubevirt.svc", "localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	certFile, keyFile, err := serving.Write(pkiDir, "virt-api-serving")
	if err != nil {
		t.Fatal(err)
	}
	nodeClient, _ := ca.Sign(pki.Request{CommonName: "virt-api", Client: true})
	nodeCert, nodeKey, err := nodeClient.Write(pkiDir, "virt-api-node-client")
	if err != nil {
		t.Fatal(err)
	}
	saCfg, _, err := cl.UserConfig(saPrefix + "kubevirt-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	vctx, stop := context.WithCancel(context.Background())
	addr, errc, err := virtapi.Start(vctx, virtapi.Options{
		REST: saCfg, Namespace: stack.Namespace, Listen: "127.0.0.1:0",
		TLSCertFile: certFile, TLSKeyFile: keyFile,
		RequestHeaderCAFile: cl.FrontProxyCA(), RequestHeaderAllowedNames: []string{"front-proxy-client"},
		NodeCAFile: caFile, NodeClientCertFile: nodeCert, NodeClientKeyFile: nodeKey,
		Log: testr.New(t).WithName("virt-api"),
	})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		select {
		case <-errc:
		case <-time.After(15 * time.Second):
		}
	})
	if err := stack.RegisterVirtAPI(ctx, cl.RESTConfig(), filepath.Join(root, "deploy"), addr.(*net.TCPAddr).Port, ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	h := &hotplugCluster{cl: cl, admin: newKVClient(t, cl.RESTConfig())}
	ctrlCfg, _, err := cl.UserConfig(saPrefix + "kubevirt-controller")
	if err != nil {
		t.Fatal(err)
	}
	h.controller = newKVClient(t, ctrlCfg)
	return h
}

func newKVClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	_ = rbacv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// put sends a subresource PUT through the aggregation layer as user and returns the code and
// the Status message.
func (h *hotplugCluster) put(t *testing.T, user, path, body string) (int, string) {
	t.Helper()
	return putAs(h.restClient(t, user), path, body)
}

func (h *hotplugCluster) restClient(t *testing.T, user string) *rest.RESTClient {
	t.Helper()
	cfg, _, err := h.cl.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rest.UnversionedRESTClientFor(withCodec(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func putAs(rc *rest.RESTClient, path, body string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := rc.Put().AbsPath("/apis/subresources.kubevirt.io/v1/namespaces/default/" + path)
	if body != "" {
		req = req.Body([]byte(body))
	}
	var code int
	err := req.Do(ctx).StatusCode(&code).Error()
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return code, se.Status().Message
	}
	if err != nil {
		return code, err.Error()
	}
	return code, ""
}

// running creates a VMI with a boot disk and makes it Running, as the node agent reports it.
func (h *hotplugCluster) running(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	guest := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &guest},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}}},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/kubevirt/cirros-container-disk-demo"}}}},
		}}
	if err := h.admin.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"phase":"Running","nodeName":"node01"}}`)
	if err := h.controller.Status().Patch(ctx, vmi, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func (h *hotplugCluster) vmi(t *testing.T, name string) *v1.VirtualMachineInstance {
	t.Helper()
	v := &v1.VirtualMachineInstance{}
	if err := h.admin.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (h *hotplugCluster) vm(t *testing.T, name string) *v1.VirtualMachine {
	t.Helper()
	v := &v1.VirtualMachine{}
	if err := h.admin.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
		t.Fatal(err)
	}
	return v
}

func addVolumeBody(name, claim string, extra string) string {
	return fmt.Sprintf(`{"name":%q,"disk":{"disk":{"bus":"scsi"}},"volumeSource":{"persistentVolumeClaim":{"claimName":%q}}%s}`, name, claim, extra)
}

// concurrentError is the API server's answer to a JSON patch whose test failed, which
// KubeVirt's virtctl retries.
const concurrentError = "the server rejected our request due to an error in our request"

func TestHotplugAndMemoryDumpOnARealAPIServer(t *testing.T) {
	h := startHotplugCluster(t)
	ctx := context.Background()

	t.Run("VMI addvolume and removevolume", func(t *testing.T) {
		h.running(t, "hot")
		if code, msg := h.put(t, "bob", "virtualmachineinstances/hot/addvolume", addVolumeBody("data", "c1", "")); code != 403 {
			t.Errorf("bob, without a role: %d %s", code, msg)
		}
		// RBAC propagates within a second or so.
		var code int
		var msg string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if code, msg = h.put(t, "alice", "virtualmachineinstances/hot/addvolume", addVolumeBody("data", "c1", `,"dryRun":["All"]`)); code != 403 {
				break
			}
		}
		if code != 202 {
			t.Fatalf("dry-run addvolume: %d %s", code, msg)
		}
		if got := h.vmi(t, "hot"); len(got.Spec.Volumes) != 1 {
			t.Fatalf("a dry run changed the VMI: %+v", got.Spec.Volumes)
		}
		if code, msg := h.put(t, "alice", "virtualmachineinstances/hot/addvolume", addVolumeBody("data", "c1", "")); code != 202 {
			t.Fatalf("addvolume: %d %s", code, msg)
		}
		got := h.vmi(t, "hot")
		if len(got.Spec.Volumes) != 2 || len(got.Spec.Domain.Devices.Disks) != 2 {
			t.Fatalf("after addvolume: %+v %+v", got.Spec.Volumes, got.Spec.Domain.Devices.Disks)
		}
		vol, disk := got.Spec.Volumes[1], got.Spec.Domain.Devices.Disks[1]
		if vol.Name != "data" || vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != "c1" || !vol.PersistentVolumeClaim.Hotpluggable {
			t.Errorf("stored volume %+v", vol)
		}
		if disk.Name != "data" || disk.Disk == nil || disk.Disk.Bus != v1.DiskBusSCSI {
			t.Errorf("stored disk %+v", disk)
		}
		if code, msg := h.put(t, "alice", "virtualmachineinstances/hot/removevolume", `{"name":"root"}`); code != 409 || !strings.Contains(msg, "Unable to remove volume [root] because it is not hotpluggable") {
			t.Errorf("removevolume root: %d %s", code, msg)
		}
		if code, msg := h.put(t, "alice", "virtualmachineinstances/hot/removevolume", `{"name":"data"}`); code != 202 {
			t.Fatalf("removevolume: %d %s", code, msg)
		}
		if got := h.vmi(t, "hot"); len(got.Spec.Volumes) != 1 || len(got.Spec.Domain.Devices.Disks) != 1 {
			t.Errorf("after removevolume: %+v %+v", got.Spec.Volumes, got.Spec.Domain.Devices.Disks)
		}
	})

	// Requests racing for one name: the test operations let exactly one through, whatever the
	// interleaving; the others see the name taken, or the API server's refusal of a stale patch,
	// which is retried as KubeVirt's virtctl does.
	t.Run("concurrent addvolume of one name", func(t *testing.T) {
		h.running(t, "race")
		const n = 6
		alice := h.restClient(t, "alice")
		var wg sync.WaitGroup
		codes := make([]int, n)
		stale := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 15 {
					code, msg := putAs(alice, "virtualmachineinstances/race/addvolume", addVolumeBody("data", fmt.Sprintf("c%d", i), ""))
					if code == 422 && msg == concurrentError {
						stale[i]++
						continue
					}
					codes[i] = code
					if code != 202 && (code != 409 || !strings.Contains(msg, "Unable to add volume [data] because volume with that name already exists")) {
						t.Errorf("request %d: %d %s", i, code, msg)
					}
					return
				}
			}()
		}
		wg.Wait()
		accepted := 0
		for _, c := range codes {
			if c == 202 {
				accepted++
			}
		}
		t.Logf("codes %v, stale patches retried %v", codes, stale)
		names := 0
		for _, v := range h.vmi(t, "race").Spec.Volumes {
			if v.Name == "data" {
				names++
			}
		}
		if accepted != 1 || names != 1 {
			t.Errorf("%d requests accepted, %d volumes named data; want 1 and 1", accepted, names)
		}
	})

	t.Run("VM volume requests", func(t *testing.T) {
		halted := v1.RunStrategyHalted
		vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "default"},
			Spec: v1.VirtualMachineSpec{RunStrategy: &halted, Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
				Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptrTo(resource.MustParse("128Mi"))},
					Devices: v1.Devices{Disks: []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}}},
				Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/kubevirt/cirros-container-disk-demo"}}}},
			}}}}
		if err := h.admin.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		// The VM has no status yet: the request creates it.
		if code, msg := h.put(t, "alice", "virtualmachines/vm1/addvolume", addVolumeBody("data", "c1", `,"dryRun":["All"]`)); code != 202 {
			t.Fatalf("dry-run addvolume: %d %s", code, msg)
		}
		if r := h.vm(t, "vm1").Status.VolumeRequests; len(r) != 0 {
			t.Fatalf("a dry run queued %+v", r)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/vm1/addvolume", addVolumeBody("data", "c1", "")); code != 202 {
			t.Fatalf("addvolume: %d %s", code, msg)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/vm1/addvolume", addVolumeBody("data", "c1", "")); code != 409 || !strings.Contains(msg, "add volume request for volume [data] already exists") {
			t.Errorf("second addvolume: %d %s", code, msg)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/vm1/addvolume", addVolumeBody("root", "c2", "")); code != 409 || !strings.Contains(msg, "Unable to add volume [root] because volume with that name already exists") {
			t.Errorf("addvolume root: %d %s", code, msg)
		}
		r := h.vm(t, "vm1").Status.VolumeRequests
		if len(r) != 1 || r[0].AddVolumeOptions == nil || r[0].AddVolumeOptions.Name != "data" || r[0].AddVolumeOptions.Disk == nil ||
			r[0].AddVolumeOptions.VolumeSource.PersistentVolumeClaim == nil || !r[0].AddVolumeOptions.VolumeSource.PersistentVolumeClaim.Hotpluggable {
			t.Errorf("stored requests %+v", r)
		}
	})

	t.Run("memorydump and removememorydump", func(t *testing.T) {
		always := v1.RunStrategyAlways
		vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "dumped", Namespace: "default"},
			Spec: v1.VirtualMachineSpec{RunStrategy: &always, Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
				Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptrTo(resource.MustParse("128Mi"))}, Devices: v1.Devices{}}}}}}
		if err := h.admin.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/memorydump", `{"claimName":"dump"}`); code != 404 || !strings.Contains(msg, `virtualmachineinstance.kubevirt.io "dumped" not found`) {
			t.Errorf("memorydump of a VM without a VMI: %d %s", code, msg)
		}
		h.running(t, "dumped")
		for name, size := range map[string]string{"dump": "241Mi", "small": "200Mi"} {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
			if err := h.admin.Create(ctx, pvc); err != nil {
				t.Fatal(err)
			}
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/memorydump", `{"claimName":"small"}`); code != 409 || !strings.Contains(msg, "pvc size [209716k] should be bigger then [241Mi]") {
			t.Errorf("memorydump to a small claim: %d %s", code, msg)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/memorydump", `{"claimName":"dump","phase":""}`); code != 202 {
			t.Fatalf("memorydump: %d %s", code, msg)
		}
		if r := h.vm(t, "dumped").Status.MemoryDumpRequest; r == nil || r.ClaimName != "dump" || r.Phase != v1.MemoryDumpAssociating {
			t.Errorf("after memorydump: %+v", r)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/memorydump", ""); code != 409 || !strings.Contains(msg, "memory dump request for pvc [dump] already in progress") {
			t.Errorf("second memorydump: %d %s", code, msg)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/removememorydump", ""); code != 202 {
			t.Fatalf("removememorydump: %d %s", code, msg)
		}
		if r := h.vm(t, "dumped").Status.MemoryDumpRequest; r == nil || r.ClaimName != "dump" || r.Phase != v1.MemoryDumpDissociating || !r.Remove {
			t.Errorf("after removememorydump: %+v", r)
		}
		if code, msg := h.put(t, "alice", "virtualmachines/dumped/removememorydump", ""); code != 409 || !strings.Contains(msg, "memory dump remove request for pvc [dump] already exists") {
			t.Errorf("second removememorydump: %d %s", code, msg)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		out, err := h.cl.Kubectl("get", "--raw", "/apis/subresources.kubevirt.io/v1/").Output()
		if err != nil {
			t.Fatal(err)
		}
		var l metav1.APIResourceList
		if err := json.Unmarshal(out, &l); err != nil {
			t.Fatal(err)
		}
		verbs := map[string]string{}
		for _, r := range l.APIResources {
			verbs[r.Name] = strings.Join(r.Verbs, ",")
		}
		for _, name := range []string{"virtualmachineinstances/addvolume", "virtualmachineinstances/removevolume", "virtualmachines/addvolume",
			"virtualmachines/removevolume", "virtualmachines/memorydump", "virtualmachines/removememorydump"} {
			if verbs[name] != "update" {
				t.Errorf("%s: verbs %q", name, verbs[name])
			}
		}
	})
}

func ptrTo[T any](v T) *T { return &v }
