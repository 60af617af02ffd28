package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The Node and its heartbeats, as the real kubelet's
// pkg/kubelet/kubelet_node_status.go (registerWithAPIServer,
// initialNode, updateNodeStatus) and pkg/kubelet/nodelease keep them: the
// Node created with the node's own credentials (the Node authorizer and
// NodeRestriction let a node create only itself), labelled
// kubernetes.io/hostname, kubernetes.io/os and kubernetes.io/arch (kubeadm
// mark-control-plane patches it, and waits up to a minute for it); status
// Ready with nodeInfo.kubeletVersion and the InternalIP; the Lease
// kube-node-lease/<node> renewed every nodeLeaseDurationSeconds/4.

// NodeLeaseNamespace holds the nodes' heartbeat leases.
const NodeLeaseNamespace = "kube-node-lease"

// nodeSpec is what the Node says about the host.
type nodeSpec struct {
	Name    string
	IP      string
	Version string
	Labels  map[string]string
}

func (n nodeSpec) labels() map[string]string {
	l := map[string]string{
		"kubernetes.io/hostname":  n.Name,
		"kubernetes.io/os":        runtime.GOOS,
		"kubernetes.io/arch":      runtime.GOARCH,
		"beta.kubernetes.io/os":   runtime.GOOS,
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	for k, v := range n.Labels {
		l[k] = v
	}
	return l
}

// status is the node's status at now: Ready, with its address and info.
func (n nodeSpec) status(now time.Time, since time.Time) corev1.NodeStatus {
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: metav1.NewTime(since)}
	}
	st := corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status (hamaster stand-in)"),
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          n.Version,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "hamaster-process://1",
		},
		Capacity:        corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(110, resource.DecimalSI)},
		Allocatable:     corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(110, resource.DecimalSI)},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}
	if n.IP != "" {
		st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.IP})
	}
	st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	return st
}

// registerNode creates the Node, or adopts an existing one (a restarted
// kubelet, or a host that joins again under its old name) by bringing its
// labels and status up to date. It returns the Node (its UID is the mirror
// pods' owner).
func registerNode(ctx context.Context, client kubernetes.Interface, n nodeSpec, since time.Time) (*corev1.Node, error) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.labels(),
			// kubeadm's patchnode reads/sets this one; the real kubelet
			// sets it too (volumes controller attach/detach).
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Status: n.status(time.Now(), since),
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		// The status of a create is dropped: set it through the subresource.
		created.Status = node.Status
		if created, err = client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("node %s status: %w", n.Name, err)
		}
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("register node %s: %w", n.Name, err)
	}
	existing, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("register node %s: %w", n.Name, err)
	}
	changed := false
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for k, v := range n.labels() {
		if existing.Labels[k] != v {
			existing.Labels[k], changed = v, true
		}
	}
	if changed {
		if existing, err = client.CoreV1().Nodes().Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("register node %s: labels: %w", n.Name, err)
		}
	}
	return updateNodeStatus(ctx, client, existing, n, since)
}

// updateNodeStatus posts the status (heartbeat) on node, keeping
// conditions others set.
func updateNodeStatus(ctx context.Context, client kubernetes.Interface, node *corev1.Node, n nodeSpec, since time.Time) (*corev1.Node, error) {
	want := n.status(time.Now(), since)
	node = node.DeepCopy()
	mine := map[corev1.NodeConditionType]bool{}
	for _, c := range want.Conditions {
		mine[c.Type] = true
	}
	for _, c := range node.Status.Conditions {
		if !mine[c.Type] {
			want.Conditions = append(want.Conditions, c)
		}
	}
	node.Status = want
	out, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return out, nil
}

// renewLease creates or renews the node's Lease, owned by its Node (as
// the real nodelease controller's newLease sets it).
func renewLease(ctx context.Context, client kubernetes.Interface, node *corev1.Node, durationSeconds int32) error {
	leases := client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, Namespace: NodeLeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), LeaseDurationSeconds: ptr.To(durationSeconds), RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease %s/%s: %w", NodeLeaseNamespace, node.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease %s/%s: %w", NodeLeaseNamespace, node.Name, err)
	}
	l.Spec.RenewTime = &now
	l.Spec.HolderIdentity = ptr.To(node.Name)
	l.Spec.LeaseDurationSeconds = ptr.To(durationSeconds)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease %s/%s: %w", NodeLeaseNamespace, node.Name, err)
	}
	return nil
}

// heartbeat keeps the Node registered, its status fresh every
// statusEvery and its Lease renewed every leaseSeconds/4, until ctx ends.
// onNode receives the Node every time it is (re)read, for the mirror pods'
// owner reference.
func heartbeat(ctx context.Context, client kubernetes.Interface, n nodeSpec, statusEvery time.Duration, leaseSeconds int32, log *slog.Logger, onNode func(*corev1.Node)) {
	since := time.Now()
	var node *corev1.Node
	leaseEvery := time.Duration(leaseSeconds) * time.Second / 4
	var nextStatus, nextLease time.Time
	for {
		now := time.Now()
		var err error
		if node == nil {
			if node, err = registerNode(ctx, client, n, since); err != nil {
				log.Warn("node registration failed; retrying", "err", err)
			} else {
				log.Info("node registered", "node", n.Name, "uid", node.UID)
				onNode(node)
				nextStatus = now.Add(statusEvery)
			}
		} else if !now.Before(nextStatus) {
			cur, gerr := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(gerr):
				log.Warn("node deleted; registering again", "node", n.Name)
				node = nil
				continue
			case gerr != nil:
				log.Warn("node status: get failed", "err", gerr)
			default:
				if node, err = updateNodeStatus(ctx, client, cur, n, since); err != nil {
					log.Warn("node status update failed", "err", err)
					node = cur
				} else {
					onNode(node)
					nextStatus = now.Add(statusEvery)
				}
			}
		}
		if node != nil && !now.Before(nextLease) {
			if err := renewLease(ctx, client, node, leaseSeconds); err != nil {
				log.Warn("lease renewal failed", "err", err)
			} else {
				nextLease = now.Add(leaseEvery)
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
