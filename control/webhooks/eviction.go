/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// EvictionPath is KubeVirt's path of the pods/eviction webhook.
const EvictionPath = "/launcher-eviction-validate"

// EvictionLookup is what the eviction webhook reads and writes: the evicted pod, its VMI, and
// the VMI's status.evacuationNodeName, which asks virt-controller to move the VMI off the node.
type EvictionLookup interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	VMI(ctx context.Context, namespace, name string) (*v1.VirtualMachineInstance, error)
	MarkEvacuation(ctx context.Context, vmi *v1.VirtualMachineInstance, node string) error
}

// EvictionConfig is the cluster's default eviction strategy ("": None).
type EvictionConfig interface {
	ClusterEvictionStrategy() v1.EvictionStrategy
}

// EvictionVerdict is what happens to an eviction of a launcher pod.
type EvictionVerdict int

const (
	// EvictionAllowed lets the pod go: its VMI stops with it.
	EvictionAllowed EvictionVerdict = iota
	// EvictionEvacuates refuses the eviction (429, so drains retry) and marks the VMI to be
	// moved off the node: by a live migration, or by an external controller.
	EvictionEvacuates
	// EvictionRefused refuses it: the VMI must move but cannot.
	EvictionRefused
)

// EffectiveEvictionStrategy is the VMI's own strategy, else the cluster's, else None.
func EffectiveEvictionStrategy(vmi *v1.VirtualMachineInstance, cluster v1.EvictionStrategy) v1.EvictionStrategy {
	if s := vmi.Spec.EvictionStrategy; s != nil {
		return *s
	}
	if cluster != "" {
		return cluster
	}
	return v1.EvictionStrategyNone
}

// EvictionDecision is KubeVirt's rule for evicting the launcher pod of vmi that runs on its
// node: None lets it go; LiveMigrate moves a migratable VMI and refuses otherwise;
// LiveMigrateIfPossible moves a migratable VMI and lets any other go; External leaves the move
// to another controller. The message says why.
func EvictionDecision(vmi *v1.VirtualMachineInstance, cluster v1.EvictionStrategy) (EvictionVerdict, string) {
	strategy := EffectiveEvictionStrategy(vmi, cluster)
	migratable := false
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceIsMigratable {
			migratable = c.Status == corev1.ConditionTrue
		}
	}
	name := vmi.Namespace + "/" + vmi.Name
	switch strategy {
	case v1.EvictionStrategyLiveMigrate:
		if !migratable {
			return EvictionRefused, fmt.Sprintf("VMI %s is configured with an eviction strategy but is not live-migratable", name)
		}
	case v1.EvictionStrategyLiveMigrateIfPossible:
		if !migratable {
			return EvictionAllowed, ""
		}
	case v1.EvictionStrategyExternal:
	default:
		return EvictionAllowed, ""
	}
	return EvictionEvacuates, fmt.Sprintf("Eviction triggered evacuation of VMI %s", name)
}

// validateEviction answers an eviction of a pod: a running VMI's launcher pod with an eviction
// strategy is not evicted but evacuated.
func (s *server) validateEviction(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create || req.Resource.Resource != "pods" || req.SubResource != "eviction" || s.opts.Evictions == nil {
		return allow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.LookupTimeout)
	defer cancel()
	log := s.opts.Logger.WithValues("pod", req.Namespace+"/"+req.Name)
	pod, err := s.opts.Evictions.Pod(ctx, req.Namespace, req.Name)
	if err != nil {
		log.Error(err, "reading an evicted pod")
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "reading pod %s: %v", req.Name, err)
	}
	if pod == nil || pod.Labels[v1.AppLabel] != v1.VirtLauncherAppLabelValue || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return allow()
	}
	vmi, err := s.opts.Evictions.VMI(ctx, req.Namespace, pod.Labels[v1.DeprecatedVirtualMachineNameLabel])
	if err != nil {
		log.Error(err, "reading the VMI of an evicted launcher pod")
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "reading the VMI of pod %s: %v", req.Name, err)
	}
	// Only the pod the VMI runs in matters: a migration's target pod, or a pod of an ended or
	// other VMI, just goes.
	if vmi == nil || string(vmi.UID) != pod.Labels[v1.CreatedByLabel] || vmi.Status.Phase != v1.Running || vmi.Status.NodeName != pod.Spec.NodeName ||
		(vmi.Status.MigrationState != nil && vmi.Status.MigrationState.TargetPod == pod.Name && !vmi.Status.MigrationState.Completed) {
		return allow()
	}
	var cluster v1.EvictionStrategy
	if ec, ok := s.cfg.(EvictionConfig); ok {
		cluster = ec.ClusterEvictionStrategy()
	}
	verdict, msg := EvictionDecision(vmi, cluster)
	switch verdict {
	case EvictionAllowed:
		return allow()
	case EvictionRefused:
		return deny(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "%s", msg)
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if !dryRun && vmi.Status.EvacuationNodeName != pod.Spec.NodeName {
		if err := s.opts.Evictions.MarkEvacuation(ctx, vmi, pod.Spec.NodeName); err != nil {
			log.Error(err, "marking a VMI for evacuation", "vmi", vmi.Name)
			return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "marking VMI %s for evacuation: %v", vmi.Name, err)
		}
		log.Info("eviction turned into an evacuation", "vmi", vmi.Name, "node", pod.Spec.NodeName)
	}
	return deny(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "%s", msg)
}
