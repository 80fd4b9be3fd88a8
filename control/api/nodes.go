package api

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// AnnotationResolver reads a node agent's endpoint from its Node object.
type AnnotationResolver struct {
	Clients Clients
}

// Endpoint returns where the node agent on nodeName listens. Any node agent can write its Node's
// annotation, so the value is checked (https://host:port only) and the client verifies the
// agent's certificate against nodeName, not against what the annotation says.
func (a AnnotationResolver) Endpoint(ctx context.Context, nodeName string) (nodeapi.Endpoint, error) {
	if nodeName == "" {
		return nodeapi.Endpoint{}, fmt.Errorf("%w: the VMI has no node yet", nodeapi.ErrUnavailable)
	}
	n, err := a.Clients.Kube().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nodeapi.Endpoint{}, fmt.Errorf("%w: node %s is gone", nodeapi.ErrUnavailable, nodeName)
		}
		return nodeapi.Endpoint{}, err
	}
	ep := n.Annotations[nodeapi.EndpointAnnotation]
	if ep == "" {
		return nodeapi.Endpoint{}, fmt.Errorf("%w: no node agent registered on node %s", nodeapi.ErrUnavailable, nodeName)
	}
	if _, err := nodeapi.ParseEndpoint(ep); err != nil {
		return nodeapi.Endpoint{}, fmt.Errorf("node %s: %w", nodeName, err)
	}
	return nodeapi.Endpoint{URL: ep, Node: nodeName}, nil
}
