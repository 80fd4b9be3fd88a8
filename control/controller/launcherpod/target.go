package launcherpod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// MigrationJobNameAnnotation on a target pod names its migration, so that a pod
// whose migration is gone can still be traced back (KubeVirt uses the same key).
const MigrationJobNameAnnotation = "kubevirt.io/migrationJobName"

// HostnameLabel is the node label the target pod's anti-affinity keys on.
const HostnameLabel = corev1.LabelHostname

// nodeNameField selects nodes by name in a NodeSelectorTerm; unlike the
// hostname label it is present on every node.
const nodeNameField = "metadata.name"

// RenderMigrationTargetPod renders the pod that receives vmi during the
// migration mig: the source's pod plus the migration's label and node
// selector, kept off sourceNode.
func RenderMigrationTargetPod(vmi *virtv1.VirtualMachineInstance, mig *virtv1.VirtualMachineInstanceMigration, sourceNode string, opts Options) (*corev1.Pod, error) {
	if mig.UID == "" {
		return nil, fmt.Errorf("migration %s/%s has no UID", mig.Namespace, mig.Name)
	}
	if sourceNode == "" {
		return nil, fmt.Errorf("VMI %s/%s has no source node", vmi.Namespace, vmi.Name)
	}
	pod, err := RenderLauncherPod(vmi, opts)
	if err != nil {
		return nil, err
	}
	pod.Name = PodName(vmi.Name, mig.UID)
	pod.Labels[virtv1.MigrationJobLabel] = string(mig.UID)
	pod.Annotations[MigrationJobNameAnnotation] = mig.Name
	for k, v := range mig.Spec.AddedNodeSelector {
		// The VMI's own constraints win: an added selector only narrows.
		if _, set := pod.Spec.NodeSelector[k]; !set {
			pod.Spec.NodeSelector[k] = v
		}
	}
	avoidNode(pod, sourceNode)
	return pod, nil
}

// avoidNode adds "not on node" to every required node selector term; terms are
// ORed, so each one needs it.
func avoidNode(pod *corev1.Pod, node string) {
	notHost := corev1.NodeSelectorRequirement{Key: HostnameLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	notName := corev1.NodeSelectorRequirement{Key: nodeNameField, Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}

	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	aff := pod.Spec.Affinity
	if aff.NodeAffinity == nil {
		aff.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil {
		req = &corev1.NodeSelector{}
		aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = req
	}
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range req.NodeSelectorTerms {
		t := &req.NodeSelectorTerms[i]
		t.MatchExpressions = append(t.MatchExpressions, notHost)
		t.MatchFields = append(t.MatchFields, notName)
	}
}
