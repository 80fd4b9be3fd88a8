package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var vmGVR = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}

// ApplyAndWait applies a VM manifest with kubectl and waits until the VM is Running; it returns
// the VM's name.
func (c *Cluster) ApplyAndWait(ctx context.Context, manifest string, timeout time.Duration) (string, error) {
	if _, err := c.kubectl(ctx, "apply", "-f", manifest); err != nil {
		return "", err
	}
	docs, err := YAMLDocs(manifest)
	if err != nil {
		return "", err
	}
	var meta metav1.PartialObjectMetadata
	if err := yaml.Unmarshal(docs[0], &meta); err != nil {
		return "", err
	}
	ns := meta.Namespace
	if ns == "" {
		ns = "default"
	}
	c.progress("waiting for VM %s/%s to be Running", ns, meta.Name)
	return meta.Name, c.WaitVMStatus(ctx, ns, meta.Name, "Running", timeout)
}

// WaitVMStatus waits for a VM's printableStatus.
func (c *Cluster) WaitVMStatus(ctx context.Context, ns, name, status string, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(c.K8s.RESTConfig())
	if err != nil {
		return err
	}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vm, err := dyn.Resource(vmGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s, _, _ := unstructuredString(vm.Object, "status", "printableStatus")
		if s != last {
			c.progress("VM %s/%s: %s", ns, name, orDash(s))
			last = s
		}
		return s == status, nil
	})
	if err != nil {
		return fmt.Errorf("VM %s/%s is %q, not %s: %w (logs in %s)", ns, name, last, status, err, c.LogDir())
	}
	return nil
}

func unstructuredString(o map[string]any, path ...string) (string, bool, error) {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DeleteVMs deletes every VM, VMI and migration and waits for their launcher pods to go.
func (c *Cluster) DeleteVMs(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(c.K8s.RESTConfig())
	if err != nil {
		return err
	}
	for _, res := range []string{"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"} {
		gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: res}
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, o := range list.Items {
			_ = dyn.Resource(gvr).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// YAMLDocs splits a manifest file into its documents.
func YAMLDocs(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs, nil
}
