package workflows

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// surgeCompensate undoes a surge slot whose new replica failed: the new
// replica is removed with everything its add created (etcd learner or
// member, VM, certificates, address reservation, LB target) through the
// remove-replica workflow, the add's own journal is dropped, and the run
// concludes naming the cause. The old replicas were not touched.
func surgeCompensate(ctx context.Context, d *Deps, r *Run, p UpgradeParams, k int, newName string, cause error) error {
	r.Info("surge: %s failed at %s (%v) — removing it and its etcd member", newName, p.Version, cause)
	rm := RemoveReplica(d, RemoveParams{Name: newName, DrainGrace: 0, Timeout: p.HealthTimeout})
	// The failed add's journal would make the removal a "superseding"
	// workflow; it has a journal of its own, so only drop the add's.
	if err := runSub(ctx, d, fmt.Sprintf("surge-%d-compensate", k), rm); err != nil {
		return fmt.Errorf("surge: new replica %s failed (%v) and removing it failed too: %w; run 'hamaster remove-replica --name %s --yes'", newName, cause, err, newName)
	}
	addJournal := filepath.Join(d.clusterDir(), fmt.Sprintf("journal-surge-%d-add.json", k))
	if err := os.Remove(addJournal); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	still := ""
	if old, err := d.Provider.Instances().Get(ctx, slotOldKey(k).Get(r)); err == nil {
		still = fmt.Sprintf(" (still at %s)", old.Template.Version)
	}
	return fmt.Errorf("%w: surge: new replica %s failed at %s (%v); removed it and its etcd member: the old replicas were not touched%s",
		ErrConcluded, newName, p.Version, cause, still)
}
