package podrunner

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	leaseNamespace = "kube-node-lease"
	// maxPods is a kubelet's default.
	maxPods = 110
	// SchedulableLabel is what KubeVirt's launcher pods select nodes by.
	SchedulableLabel = "kubevirt.io/schedulable"
)

// nodeLabels are set at registration and restored when missing.
func (r *Runner) nodeLabels() map[string]string {
	return map[string]string{
		corev1.LabelHostname:   r.opts.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		SchedulableLabel:       "true",
	}
}

// registerNode creates the Node (or adopts an existing one, adding missing labels) and posts its
// status, retrying until ctx ends.
func (r *Runner) registerNode(ctx context.Context) error {
	delay := time.Second
	for {
		err := r.tryRegister(ctx)
		if err == nil {
			r.log.Info("node registered", "nodeIP", r.opts.NodeIP)
			return nil
		}
		r.log.Error(err, "registering the node; retrying", "in", delay)
		select {
		case <-ctx.Done():
			return fmt.Errorf("podrunner: register node: %w", err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func (r *Runner) tryRegister(ctx context.Context) error {
	nodes := r.opts.Client.CoreV1().Nodes()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName, Labels: r.nodeLabels()},
		Spec:       corev1.NodeSpec{PodCIDR: r.opts.CNI.Subnet, PodCIDRs: []string{r.opts.CNI.Subnet}},
	}
	r.fillNodeStatus(&node.Status, time.Now())
	_, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return err
		}
		return r.updateNodeStatus(ctx)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := nodes.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		for k, v := range r.nodeLabels() {
			if existing.Labels[k] != v {
				if existing.Labels == nil {
					existing.Labels = map[string]string{}
				}
				existing.Labels[k], changed = v, true
			}
		}
		if !changed {
			return nil
		}
		_, err = nodes.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return r.updateNodeStatus(ctx)
}

// updateNodeStatus posts the node's status with fresh heartbeat times.
func (r *Runner) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := r.opts.Client.CoreV1().Nodes().Get(ctx, r.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.fillNodeStatus(&node.Status, time.Now())
		_, err = r.opts.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// fillNodeStatus sets what a kubelet reports: capacity from this machine, addresses, node info
// and the conditions (Ready while the runner runs).
func (r *Runner) fillNodeStatus(st *corev1.NodeStatus, now time.Time) {
	capacity := machineCapacity(r.opts.StateDir)
	st.Capacity = capacity
	st.Allocatable = capacity.DeepCopy()
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: r.opts.NodeIP},
		{Type: corev1.NodeHostName, Address: r.opts.NodeName},
	}
	st.NodeInfo = nodeInfo()
	st.Phase = ""
	t := metav1.NewTime(now).Rfc3339Copy()
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "qvirt pod runner is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "qvirt pod runner does not watch memory pressure"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "qvirt pod runner does not watch disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "qvirt pod runner does not watch PID pressure"},
	} {
		c.LastHeartbeatTime, c.LastTransitionTime = t, t
		found := false
		for i := range st.Conditions {
			if st.Conditions[i].Type == c.Type {
				if st.Conditions[i].Status == c.Status {
					c.LastTransitionTime = st.Conditions[i].LastTransitionTime
				}
				st.Conditions[i], found = c, true
			}
		}
		if !found {
			st.Conditions = append(st.Conditions, c)
		}
	}
}

func machineCapacity(stateDir string) corev1.ResourceList {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI)
	}
	var fs unix.Statfs_t
	if unix.Statfs(stateDir, &fs) == nil {
		rl[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI)
	}
	return rl
}

func nodeInfo() corev1.NodeSystemInfo {
	info := corev1.NodeSystemInfo{
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
		ContainerRuntimeVersion: "qvirt-podrunner://0",
		MachineID:               readTrimmed("/etc/machine-id"),
		BootID:                  readTrimmed("/proc/sys/kernel/random/boot_id"),
		OSImage:                 "Linux",
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		info.KernelVersion = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				info.OSImage = strings.Trim(v, `"`)
			}
		}
	}
	return info
}

func readTrimmed(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// heartbeat renews the node lease every quarter of its duration and posts NodeStatus every
// StatusInterval, as a kubelet does, so the node lifecycle controller keeps the node Ready.
func (r *Runner) heartbeat(ctx context.Context) {
	r.renewLease(ctx)
	leaseTick := time.NewTicker(r.opts.LeaseDuration / 4)
	defer leaseTick.Stop()
	statusTick := time.NewTicker(r.opts.StatusInterval)
	defer statusTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaseTick.C:
			r.renewLease(ctx)
		case <-statusTick.C:
			err := r.updateNodeStatus(ctx)
			if apierrors.IsNotFound(err) {
				// Someone deleted the Node: register it again.
				err = r.tryRegister(ctx)
			}
			if err != nil && ctx.Err() == nil {
				r.log.Error(err, "posting node status")
			}
		}
	}
}

func (r *Runner) renewLease(ctx context.Context) {
	leases := r.opts.Client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName, Namespace: leaseNamespace}}
			if node, err := r.opts.Client.CoreV1().Nodes().Get(ctx, r.opts.NodeName, metav1.GetOptions{}); err == nil {
				// Owned by the Node, so deleting the Node deletes its lease.
				lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
			}
			r.fillLease(lease, now)
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		r.fillLease(lease, now)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil {
		r.log.Error(err, "renewing the node lease")
	}
}

func (r *Runner) fillLease(l *coordinationv1.Lease, now metav1.MicroTime) {
	l.Spec.HolderIdentity = ptr.To(r.opts.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(r.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
}
