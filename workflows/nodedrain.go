package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
)

// StepDrainNode is remove-replica's drain of the victim's Node (flavors
// whose masters are Nodes: flavors.NodeDrainer).
const StepDrainNode = "drain-node"

// NodeDrain is how remove-replica and rolling-upgrade treat a master's
// Node before they touch the master (flavors.NodeDrainer).
type NodeDrain struct {
	// Skip leaves the Node as it is (--skip-drain): its pods go down
	// with the master.
	Skip bool
	// Timeout bounds the drain (0: the flavor's default).
	Timeout time.Duration
}

// params records the choice in a workflow's parameters, so a resumed
// run keeps it.
func (n NodeDrain) params(p map[string]string) {
	if n.Skip {
		p["skip-drain"] = "true"
	}
}

func nodeDrainerOf(d *Deps) flavors.NodeDrainer {
	return d.FlavorCaps().NodeDrainer
}

// drainNode drains the Node of master name when the flavor's masters are
// Nodes, unless the run skips drains; a master that is gone or not
// running has no pods to move (its Node is removed with it). The
// cordon is journaled, so that uncordonNode undoes it.
func drainNode(ctx context.Context, d *Deps, r *Run, name string, timeout time.Duration) error {
	nd := nodeDrainerOf(d)
	if nd == nil {
		return nil
	}
	if r.Param("skip-drain") == "true" {
		r.Info("--skip-drain: the Node of %s is not drained; its pods go down with it", name)
		return nil
	}
	rep, err := d.Provider.Instances().Get(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !rep.Running() {
		r.Info("not draining the Node of %s: the master is not running", name)
		return nil
	}
	if err := cordonedKey(name).Mark(r); err != nil {
		return err
	}
	r.Waiting("the Node of %s to drain (PodDisruptionBudgets honoured)", name)
	if err := nd.Drain(ctx, rep, timeout); err != nil {
		return fmt.Errorf("drain the Node of %s: %w", name, err)
	}
	return nil
}

// uncordonNode makes the Node of master name schedulable again when
// drainNode cordoned it in this run.
func uncordonNode(ctx context.Context, d *Deps, r *Run, name string) error {
	nd := nodeDrainerOf(d)
	if nd == nil || !cordonedKey(name).IsSet(r) {
		return nil
	}
	rep, err := d.Provider.Instances().Get(ctx, name)
	if err != nil {
		return err
	}
	if err := nd.Uncordon(ctx, rep); err != nil {
		return err
	}
	return cordonedKey(name).Clear(r)
}

// drainNodeStep is remove-replica's drain of the victim's Node.
func drainNodeStep(d *Deps, victim string, n NodeDrain) Step {
	return Step{
		Name: StepDrainNode,
		Plan: []string{"unless --skip-drain: kubectl drain of the victim's Node on another master (cordon, evictions honouring PodDisruptionBudgets, DaemonSet pods left), bounded; refused naming the budgets that hold it, the Node uncordoned again, nothing else changed"},
		Run: func(ctx context.Context, r *Run) error {
			return drainNode(ctx, d, r, victim, n.Timeout)
		},
	}
}
