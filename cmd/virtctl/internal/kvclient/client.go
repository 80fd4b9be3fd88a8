// Package kvclient talks to KubeVirt's API the way KubeVirt's virtctl does: PUTs and GETs on
// the aggregated subresources.kubevirt.io/v1 API, websocket streams through the kube-apiserver,
// the kubevirt.io/v1 objects, and the claims volumes and memory dumps use. It is built from a
// client-go REST config, so every request, websockets included, carries the kubeconfig's
// credentials.
package kvclient

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/version"
)

// SubresourceGroup is the aggregated API group of the subresources.
const SubresourceGroup = "subresources.kubevirt.io"

// Resource names of the subresource paths.
const (
	VirtualMachines         = "virtualmachines"
	VirtualMachineInstances = "virtualmachineinstances"
)

// Client reaches one cluster.
type Client struct {
	config *rest.Config
	sub    *rest.RESTClient
	kv     *rest.RESTClient
	core   *rest.RESTClient
}

// New builds a client from a REST config (which it does not modify).
func New(config *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// Status and the option kinds under the core version, as client-go's own scheme does,
	// so error bodies decode into StatusErrors.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()

	restFor := func(gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(config)
		c.GroupVersion = &gv
		c.APIPath = "/apis"
		if gv.Group == "" {
			c.APIPath = "/api"
		}
		c.NegotiatedSerializer = codecs
		c.ContentType = runtime.ContentTypeJSON
		if c.UserAgent == "" {
			c.UserAgent = "virtctl/" + version.GitVersion
		}
		return rest.RESTClientFor(c)
	}
	sub, err := restFor(schema.GroupVersion{Group: SubresourceGroup, Version: "v1"})
	if err != nil {
		return nil, err
	}
	kv, err := restFor(v1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	core, err := restFor(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{config: rest.CopyConfig(config), sub: sub, kv: kv, core: core}, nil
}

// ServerVersion reads GET /apis/subresources.kubevirt.io/v1/version.
func (c *Client) ServerVersion(ctx context.Context) (version.Info, error) {
	var info version.Info
	b, err := body(ctx, c.sub.Get().AbsPath("/apis", SubresourceGroup, "v1", "version"))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decoding the server version: %w", err)
	}
	return info, nil
}

// Put sends PUT .../namespaces/ns/resource/name/subresource with body marshalled as JSON;
// a nil body sends no body at all, as KubeVirt's virtctl does for softreboot and reset.
func (c *Client) Put(ctx context.Context, ns, resource, name, subresource string, body any) error {
	req := c.sub.Put().Namespace(ns).Resource(resource).Name(name).SubResource(subresource)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		req = req.Body(b)
	}
	return req.Do(ctx).Error()
}

// GuestAgent reads one of the guest agent's subresources (guestosinfo, userlist,
// filesystemlist) of a VMI, as JSON.
func (c *Client) GuestAgent(ctx context.Context, ns, name, subresource string) ([]byte, error) {
	return body(ctx, c.sub.Get().Namespace(ns).Resource(VirtualMachineInstances).Name(name).SubResource(subresource))
}

// body returns the response's body, or the server's Status as the error: DoRaw would give a
// generic error for an error answer, without the Status message.
func body(ctx context.Context, req *rest.Request) ([]byte, error) {
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

// Screenshot fetches the PNG of a VMI's display.
func (c *Client) Screenshot(ctx context.Context, ns, name string, moveCursor bool) ([]byte, error) {
	req := c.sub.Get().Namespace(ns).Resource(VirtualMachineInstances).Name(name).SubResource("vnc", "screenshot")
	if moveCursor {
		req = req.Param("moveCursor", "true")
	}
	return body(ctx, req)
}
