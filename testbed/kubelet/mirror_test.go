package kubelet

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestMirrorPodsFollowStaticPods(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-a", UID: types.UID("node-uid")}}
	client := fake.NewClientset(node)
	m := newMirrors(client, slog.New(slog.NewTextHandler(io.Discard, nil)))

	etcd, err := ParseStaticPod(readTestdata(t, "etcd.yaml"), "/m/etcd.yaml", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	running := corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.2"}
	get := func() *corev1.Pod {
		t.Helper()
		p, err := client.CoreV1().Pods("kube-system").Get(ctx, "etcd-host-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	countActions := func(verb string) int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == verb && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}

	if err := m.sync(ctx, node, []podState{{StaticPod: etcd, Status: running}}); err != nil {
		t.Fatal(err)
	}
	p := get()
	if p.Annotations[ConfigHashAnnotation] != etcd.Hash || p.Annotations[ConfigMirrorAnnotation] != etcd.Hash ||
		p.Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] != "https://10.0.0.2:2379" || p.Labels["component"] != "etcd" {
		t.Errorf("mirror pod metadata: %v %v", p.Annotations, p.Labels)
	}
	// What NodeRestriction checks (plugin/pkg/admission/noderestriction/admission.go admitPodCreate).
	if o := p.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].APIVersion != "v1" || o[0].Name != "host-a" || o[0].UID != "node-uid" ||
		o[0].Controller == nil || !*o[0].Controller || o[0].BlockOwnerDeletion != nil {
		t.Errorf("owner references %+v", o)
	}
	if p.Spec.NodeName != "host-a" || p.Status.Phase != corev1.PodRunning {
		t.Errorf("nodeName %q phase %q", p.Spec.NodeName, p.Status.Phase)
	}

	// Unchanged: no create, no status update.
	creates, updates := countActions("create"), countActions("update")
	if err := m.sync(ctx, node, []podState{{StaticPod: etcd, Status: running}}); err != nil {
		t.Fatal(err)
	}
	if countActions("create") != creates || countActions("update") != updates {
		t.Errorf("an unchanged pod was written again: %v", client.Actions())
	}

	// A changed status is posted.
	running.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastProbeTime: metav1.NewTime(time.Unix(0, 0))}}
	if err := m.sync(ctx, node, []podState{{StaticPod: etcd, Status: running}}); err != nil {
		t.Fatal(err)
	}
	if c := get().Status.Conditions; len(c) != 1 || c[0].Status != corev1.ConditionTrue {
		t.Errorf("status not posted: %v", c)
	}

	// A changed manifest: the mirror pod is recreated with the new hash.
	changed, err := ParseStaticPod(append(readTestdata(t, "etcd.yaml"), []byte("# no change\n")...), "/m/etcd.yaml", "host-a")
	if err != nil || changed.Hash != etcd.Hash {
		t.Fatalf("a comment changed the hash: %v", err)
	}
	etcd.Pod.Spec.Containers[0].Command = append(etcd.Pod.Spec.Containers[0].Command, "--v=2")
	etcd.Hash = "newhash"
	etcd.Pod.Annotations[ConfigHashAnnotation] = "newhash"
	if err := m.sync(ctx, node, []podState{{StaticPod: etcd, Status: running}}); err != nil {
		t.Fatal(err)
	}
	if p := get(); p.Annotations[ConfigHashAnnotation] != "newhash" || p.Annotations[ConfigMirrorAnnotation] != "newhash" {
		t.Errorf("mirror pod not recreated: %v", p.Annotations)
	}
	if countActions("delete") != 1 {
		t.Errorf("deletes = %d, want 1", countActions("delete"))
	}

	// A pod that is not a mirror pod is left alone; a mirror pod without a
	// static pod is deleted.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}, Spec: corev1.PodSpec{NodeName: "host-a"}}
	if _, err := client.CoreV1().Pods("kube-system").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.sync(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "coredns" {
		t.Errorf("pods left: %v", pods.Items)
	}

	// A DaemonSet's pod deleted (its roll): its deletion is confirmed at
	// once, as a kubelet whose containers for it are gone confirms it;
	// the pod not deleted stays.
	now := metav1.Now()
	rolled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-old", Namespace: "kube-system", UID: "old-uid", DeletionTimestamp: &now}, Spec: corev1.PodSpec{NodeName: "host-a"}}
	if _, err := client.CoreV1().Pods("kube-system").Create(ctx, rolled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deletes := countActions("delete")
	if err := m.sync(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("kube-system").Get(ctx, "kube-proxy-old", metav1.GetOptions{}); err == nil {
		t.Error("the deleted DaemonSet pod is still there")
	}
	var confirmed bool
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetName() == "kube-proxy-old" {
			o := d.GetDeleteOptions()
			confirmed = o.GracePeriodSeconds != nil && *o.GracePeriodSeconds == 0 && o.Preconditions != nil && o.Preconditions.UID != nil && *o.Preconditions.UID == "old-uid"
		}
	}
	if !confirmed || countActions("delete") != deletes+1 {
		t.Errorf("the deletion was not confirmed with grace period 0 and the pod's UID: %v", client.Actions())
	}
	if _, err := client.CoreV1().Pods("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err != nil {
		t.Errorf("a pod not deleted went: %v", err)
	}
}
