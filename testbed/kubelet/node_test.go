package kubelet

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRegisterNodeAndLease(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	ns := nodeSpec{Name: "host-a", IP: "10.0.0.2", Version: "v1.33.13", Labels: map[string]string{"role": "cp"}}
	n, err := registerNode(ctx, client, ns, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	check := func(n *corev1.Node) {
		t.Helper()
		if n.Labels["kubernetes.io/hostname"] != "host-a" || n.Labels["kubernetes.io/os"] == "" || n.Labels["role"] != "cp" {
			t.Errorf("labels %v", n.Labels)
		}
		if n.Status.NodeInfo.KubeletVersion != "v1.33.13" {
			t.Errorf("kubeletVersion %q", n.Status.NodeInfo.KubeletVersion)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !ready || len(n.Status.Addresses) == 0 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}) {
			t.Errorf("status %+v", n.Status)
		}
	}
	check(n)

	// Registering again (a restarted kubelet) adopts the Node, keeping
	// what others set (kubeadm's control-plane label and taint).
	n.Labels["node-role.kubernetes.io/control-plane"] = ""
	n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "NetworkUnavailable", Status: corev1.ConditionFalse})
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns.Version = "v1.34.4"
	n2, err := registerNode(ctx, client, ns, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n2.Labels["node-role.kubernetes.io/control-plane"]; !ok || len(n2.Spec.Taints) != 1 || n2.Status.NodeInfo.KubeletVersion != "v1.34.4" {
		t.Errorf("adopted node: labels %v taints %v version %q", n2.Labels, n2.Spec.Taints, n2.Status.NodeInfo.KubeletVersion)
	}
	found := false
	for _, c := range n2.Status.Conditions {
		found = found || c.Type == "NetworkUnavailable"
	}
	if !found {
		t.Errorf("a condition set by others was dropped: %v", n2.Status.Conditions)
	}

	if err := renewLease(ctx, client, n2, 40); err != nil {
		t.Fatal(err)
	}
	l1, err := client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, "host-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *l1.Spec.HolderIdentity != "host-a" || *l1.Spec.LeaseDurationSeconds != 40 || l1.OwnerReferences[0].UID != n2.UID {
		t.Errorf("lease %+v", l1)
	}
	if err := renewLease(ctx, client, n2, 40); err != nil {
		t.Fatal(err)
	}
	l2, err := client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, "host-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Spec.RenewTime.Before(l1.Spec.RenewTime) {
		t.Errorf("renew time went back: %v → %v", l1.Spec.RenewTime, l2.Spec.RenewTime)
	}
}
