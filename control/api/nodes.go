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

// Endpoint returns https://host:port of the node agent on nodeName.
func (a AnnotationResolver) Endpoint(ctx context.Context, nodeName string) (string, error) {
	if nodeName == "" {
		return "", fmt.Errorf("%w: the VMI has no node yet", nodeapi.ErrUnavailable)
	}
	n, err := a.Clients.Kube().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: node %s is gone", nodeapi.ErrUnavailable, nodeName)
		}
		return "", err
	}
	ep := n.Annotations[nodeapi.EndpointAnnotation]
	if ep == "" {
		return "", fmt.Errorf("%w: no node agent registered on node %s", nodeapi.ErrUnavailable, nodeName)
	}
	return ep, nil
}
