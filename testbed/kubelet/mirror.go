package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Mirror pods, as the real kubelet's pkg/kubelet/pod/mirror_client.go and
// the static-pod branch of its syncPod keep them: one per static pod,
// named like it, carrying the manifest's labels and annotations (kubeadm
// reads kubeadm.kubernetes.io/etcd.advertise-client-urls from etcd's, and
// selects pods by component=<name>), config.hash, and config.mirror = the
// hash; a mirror pod whose config.mirror differs from the static pod's
// hash is deleted and created again (kubeadm upgrade's
// WaitForStaticPodHashChange waits for the new hash); one with no static
// pod is deleted. To pass the NodeRestriction admission plugin it is
// created with the node's own credentials, spec.nodeName the node and a
// single controller owner reference to the Node, without
// blockOwnerDeletion.

// mirrorPod is the API object for a static pod on node.
func mirrorPod(sp StaticPod, node *corev1.Node) *corev1.Pod {
	p := sp.Pod.DeepCopy()
	p.UID, p.ResourceVersion = "", ""
	p.Annotations[ConfigMirrorAnnotation] = sp.Hash
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true),
	}}
	p.Status = corev1.PodStatus{}
	return p
}

// mirrors syncs the mirror pods of one node and remembers the statuses it
// posted, so an unchanged status is not posted again.
type mirrors struct {
	client kubernetes.Interface
	log    *slog.Logger
	posted map[types.UID]corev1.PodStatus
}

func newMirrors(client kubernetes.Interface, log *slog.Logger) *mirrors {
	return &mirrors{client: client, log: log, posted: map[types.UID]corev1.PodStatus{}}
}

// sync makes the node's mirror pods match states; errors are collected,
// the other pods still synced.
func (m *mirrors) sync(ctx context.Context, node *corev1.Node, states []podState) error {
	list, err := m.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		return fmt.Errorf("list pods of node %s: %w", node.Name, err)
	}
	existing := map[string]*corev1.Pod{}
	var deleted []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		_, mirror := p.Annotations[ConfigMirrorAnnotation]
		switch {
		case mirror && p.DeletionTimestamp == nil:
			existing[p.Namespace+"/"+p.Name] = p
		case !mirror && p.DeletionTimestamp != nil:
			deleted = append(deleted, p)
		}
	}
	var errs []error
	// A pod the API server scheduled here (a DaemonSet's) never runs on
	// the stand-in: once it is deleted, none of its containers is left,
	// so its deletion is confirmed at once, as the kubelet's status
	// manager confirms a terminated pod's (pkg/kubelet/status/
	// status_manager.go syncPod: canBeDeleted → Delete with grace period
	// 0 and the pod's UID as precondition). Without it a DaemonSet's
	// roll would wait on a Terminating pod forever.
	for _, p := range deleted {
		m.log.Info("pod deleted; none of its containers runs here: deletion confirmed", "pod", p.Namespace+"/"+p.Name)
		if err := m.delete(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range states {
		key := s.FullName()
		mp := existing[key]
		delete(existing, key)
		if mp != nil && mp.Annotations[ConfigMirrorAnnotation] != s.Hash {
			m.log.Info("mirror pod outdated; recreating it", "pod", key, "hash", s.Hash, "mirror_hash", mp.Annotations[ConfigMirrorAnnotation])
			if err := m.delete(ctx, mp); err != nil {
				errs = append(errs, err)
				continue
			}
			mp = nil
		}
		if mp == nil {
			created, err := m.client.CoreV1().Pods(s.Pod.Namespace).Create(ctx, mirrorPod(s.StaticPod, node), metav1.CreateOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("create mirror pod %s: %w", key, err))
				continue
			}
			m.log.Info("mirror pod created", "pod", key, "hash", s.Hash)
			mp = created
		}
		if last, ok := m.posted[mp.UID]; ok && equality.Semantic.DeepEqual(last, s.Status) {
			continue
		}
		mp = mp.DeepCopy()
		qos := mp.Status.QOSClass // set by the apiserver, immutable
		mp.Status = s.Status
		mp.Status.QOSClass = qos
		if _, err := m.client.CoreV1().Pods(mp.Namespace).UpdateStatus(ctx, mp, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("mirror pod %s status: %w", key, err))
			continue
		}
		m.posted[mp.UID] = s.Status
	}
	for key, mp := range existing {
		m.log.Info("mirror pod without a static pod; deleting it", "pod", key)
		if err := m.delete(ctx, mp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *mirrors) delete(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	err := m.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	delete(m.posted, uid)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
