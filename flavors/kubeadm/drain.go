package kubeadm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// DrainTimeout bounds a Node's drain when the caller gives no bound.
const DrainTimeout = 5 * time.Minute

// Drain cordons replica's Node and evicts its pods, as kubeadm's docs
// ask before a control-plane node is upgraded ("Drain the node": kubectl
// drain <node> --ignore-daemonsets) or removed (kubectl drain
// --delete-emptydir-data --ignore-daemonsets, then kubeadm reset). It is
// the real kubectl drain on a master, through its admin.conf: evictions
// honour PodDisruptionBudgets (retried until timeout, 0: DrainTimeout),
// DaemonSet pods and the static pods' mirrors stay, and a pod no
// controller manages is not deleted (kubectl drain refuses it without
// --force: the operator decides). A drain that does not finish is
// refused (FailedPrecondition) naming each pod a PodDisruptionBudget
// holds on the Node, and the Node is uncordoned again: nothing changed
// but the pods already evicted, which their controllers recreate
// elsewhere.
func (f *Flavor) Drain(ctx context.Context, replica providers.Replica, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DrainTimeout
	}
	master, err := f.apiMaster(ctx, replica, "drain the Node of "+replica.Name)
	if err != nil {
		return err
	}
	node := f.m.MachineHostname(replica.Name, replica.Address)
	// kubectl's own bound, with a minute's room for the SSH session's.
	dctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	// A Node that is gone (recover deletes the Nodes of the masters it
	// drops) has nothing to drain. Pods whose deletion a dead kubelet
	// never confirms are not waited for beyond a minute
	// (--skip-wait-for-delete-timeout): their Node is leaving anyway.
	_, stderr, derr := f.m.RunOnMachine(dctx, master, ifNodeExists(node, fmt.Sprintf("%sdrain %s --ignore-daemonsets --delete-emptydir-data --skip-wait-for-delete-timeout=60 --timeout=%ds",
		adminKubectl, remote.ShellQuote(node), int(timeout.Seconds()))))
	if derr == nil {
		return nil
	}
	derr = fmt.Errorf("kubectl drain %s on %s: %w (stderr: %s)", node, master, derr, tail(stderr))
	if ctx.Err() != nil {
		return derr // interrupted: a re-run drains again
	}
	// The way back: the Node schedulable again.
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer ucancel()
	undone := "the Node is uncordoned again"
	if uerr := f.Uncordon(uctx, replica); uerr != nil {
		undone = fmt.Sprintf("uncordoning the Node again failed (%v): run kubectl uncordon %s", uerr, node)
	}
	held, lerr := f.budgetsHolding(ctx, master, node)
	if lerr != nil {
		return fmt.Errorf("%w; %s (and listing the PodDisruptionBudgets failed: %v)", derr, undone, lerr)
	}
	if len(held) == 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "drain of Node %s stopped; %s: %w", node, undone, derr)
	}
	return errkind.Errorf(errkind.FailedPrecondition, "drain of Node %s stopped: %s; %s and nothing else changed (let the budget allow a disruption, or pass --skip-drain: those pods then go down with the master): %w",
		node, strings.Join(held, "; "), undone, derr)
}

// Uncordon marks replica's Node schedulable again (kubeadm's docs, after
// a node's upgrade: kubectl uncordon <node>). A Node that is gone is not
// an error.
func (f *Flavor) Uncordon(ctx context.Context, replica providers.Replica) error {
	master, err := f.apiMaster(ctx, replica, "uncordon the Node of "+replica.Name)
	if err != nil {
		return err
	}
	node := f.m.MachineHostname(replica.Name, replica.Address)
	if _, stderr, err := f.m.RunOnMachine(ctx, master, ifNodeExists(node, adminKubectl+"uncordon "+remote.ShellQuote(node))); err != nil {
		return fmt.Errorf("kubectl uncordon %s on %s: %w (stderr: %s)", node, master, err, tail(stderr))
	}
	return nil
}

// ifNodeExists is a shell command that runs cmd when the Node exists,
// succeeds without it when the API says there is no such Node, and fails
// when the API cannot be asked.
func ifNodeExists(node, cmd string) string {
	return fmt.Sprintf("n=$(%sget node %s --ignore-not-found -o name) || exit 1; if [ -n \"$n\" ]; then %s; fi", adminKubectl, remote.ShellQuote(node), cmd)
}

// apiMaster is the master whose admin.conf reaches the API for replica's
// Node: another running master, else replica itself (a sole master); one
// listing of the masters.
func (f *Flavor) apiMaster(ctx context.Context, replica providers.Replica, what string) (string, error) {
	rs, err := f.running(ctx)
	if err != nil {
		return "", err
	}
	if len(rs) == 0 {
		return "", noneRunning(what)
	}
	for _, r := range rs {
		if r.Name != replica.Name {
			return r.Name, nil
		}
	}
	return rs[0].Name, nil
}

// budgetsSep separates the two lists budgetsHolding reads in one session.
const budgetsSep = "---hamaster-pods---"

// budgetsHolding names, for each pod on node that a PodDisruptionBudget
// allowing no disruption covers, the pod and the budget.
func (f *Flavor) budgetsHolding(ctx context.Context, master, node string) ([]string, error) {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, fmt.Sprintf("%sget pdb -A -o json && echo %s && %sget pods -A --field-selector spec.nodeName=%s -o json",
		adminKubectl, budgetsSep, adminKubectl, remote.ShellQuote(node)))
	if err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets and the pods of %s on %s: %w (stderr: %s)", node, master, err, tail(stderr))
	}
	pdbs, pods, ok := bytes.Cut(out, []byte(budgetsSep+"\n"))
	if !ok {
		return nil, fmt.Errorf("list PodDisruptionBudgets and the pods of %s on %s: no %s in the answer", node, master, budgetsSep)
	}
	return BlockingBudgets(pdbs, pods)
}

// BlockingBudgets reads kubectl's JSON lists of PodDisruptionBudgets and
// of a Node's pods and names each pod that would block a drain: not a
// DaemonSet's nor a static pod's mirror (kubectl drain leaves those),
// covered by a budget in its namespace whose status allows no disruption
// now (the disruption controller's figure, which the eviction API
// checks). policy/v1's selectors: an empty one covers every pod of its
// namespace, a null one none.
func BlockingBudgets(pdbJSON, podJSON []byte) ([]string, error) {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := json.Unmarshal(pdbJSON, &pdbs); err != nil {
		return nil, fmt.Errorf("PodDisruptionBudgets: %w", err)
	}
	var pods corev1.PodList
	if err := json.Unmarshal(podJSON, &pods); err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	var held []string
	for _, pod := range pods.Items {
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror || ownedByDaemonSet(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		for _, b := range pdbs.Items {
			if b.Namespace != pod.Namespace || b.Status.DisruptionsAllowed > 0 || b.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			held = append(held, fmt.Sprintf("pod %s/%s is held by PodDisruptionBudget %s/%s (0 disruptions allowed: %d healthy, %d desired)",
				pod.Namespace, pod.Name, b.Namespace, b.Name, b.Status.CurrentHealthy, b.Status.DesiredHealthy))
		}
	}
	return held, nil
}

func ownedByDaemonSet(pod corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}
