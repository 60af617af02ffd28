package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// RotateParams are rotate-certs' arguments.
type RotateParams struct {
	// Within renews certificates expiring within it (CertRenewWindow when
	// 0); certificates missing a SAN the cluster needs are always renewed.
	Within        time.Duration
	DrainGrace    time.Duration
	HealthTimeout time.Duration
}

// RotateCerts builds the rotate-certs workflow: for each replica in turn
// whose apiserver certificate does not cover the endpoint (static IP / LB,
// every DNS name, the service IP, kubernetes.*, itself) or expires within
// p.Within: drained from the LB, etcd leadership moved off it inside the
// drain grace, certificates reissued by the cluster CA, recreated with
// them on the same disk, health-gated (fail-fast), back in the LB. A
// replica that fails is restored from its last known-good template and
// the run stops.
func RotateCerts(d *Deps, p RotateParams, replicas []string) *Workflow {
	if p.Within <= 0 {
		p.Within = CertRenewWindow
	}
	if p.HealthTimeout <= 0 {
		p.HealthTimeout = 5 * time.Minute
	}
	wf := &Workflow{Name: "rotate-certs", Params: map[string]string{"expiring-within": p.Within.String()}}
	renewer := d.FlavorCaps().CertRenewer
	renews := renewer != nil
	issuer := d.FlavorCaps().ReplicaCertIssuer
	wf.Check = func(context.Context) error {
		if issuer == nil && !renews {
			return errkind.Errorf(errkind.FailedPrecondition, "the %s provider's masters carry the certificates kube-up made (kube-env and kube-master-certs metadata), which hamaster does not issue or rotate; renew them with the tool that built the cluster", d.Provider.Name())
		}
		return nil
	}
	wf.Steps = append(wf.Steps, Step{
		Name: StepSnapshot, Plan: []string{"etcd Maintenance.Snapshot → <state-dir>/<cluster>/snapshots/"},
		Run: func(ctx context.Context, r *Run) error { return takeSnapshot(ctx, d, r, "rotate-certs") },
	})
	for _, name := range replicas {
		if renews {
			wf.Steps = append(wf.Steps, Step{
				Name: "rotate/" + name,
				Plan: []string{"skip unless one of its certificates the flavor's tool renews expires within " + p.Within.String() + " (kubeadm certs check-expiration)", "drain from the LB; move etcd leadership away inside the drain grace", "the flavor renews them (backup; kubeadm certs renew all; its static pods restarted one at a time)", "health gate (the flavor's rollback to the backup on failure, and stop)", "back in the LB"},
				Run:  func(ctx context.Context, r *Run) error { return renewOne(ctx, d, r, p, renewer, name) },
			})
			continue
		}
		wf.Steps = append(wf.Steps, Step{
			Name: "rotate/" + name,
			Plan: []string{"skip if its certificate covers every SAN and is not expiring", "drain from the LB; move etcd leadership away inside the drain grace", "reissue its certificates, instances.Recreate with them", "health gate (rollback to last known good on failure)", "back in the LB"},
			Run:  func(ctx context.Context, r *Run) error { return rotateOne(ctx, d, r, p, issuer, name) },
		})
	}
	return wf
}

// LeaderLast returns replicas with the one whose etcd member leads moved
// to the end, for RotateCerts: leadership then moves once, onto a replica
// already done, instead of once for each replica it lands on that is
// still to come (each hand-over can cost a client a write:
// drainMovingLeader). When etcd cannot be asked the order is kept; the
// workflow's own steps report an unreachable etcd. A resumed run may
// get another order: its journal skips the steps done by name.
func LeaderLast(ctx context.Context, d *Deps, replicas []string) []string {
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil || len(rs) < 2 {
		return replicas
	}
	leader, err := leaderReplica(ctx, d, rs)
	if err != nil || leader == "" || !slices.Contains(replicas, leader) {
		return replicas
	}
	out := slices.DeleteFunc(slices.Clone(replicas), func(n string) bool { return n == leader })
	return append(out, leader)
}

// renewOne has the flavor renew replica name's certificates when one of
// them expires within p.Within: drained, leadership moved off it, renewed
// (the flavor saves what its rollback restores), health-gated at the
// version it ran, the flavor's backup dropped, back in the LB. A failure
// rolls it back with the flavor's RollbackMaster and concludes the run.
// Journal keys: renew-version:<name> once begun (the version it ran),
// renewed:<name> once it passed its health gate.
func renewOne(ctx context.Context, d *Deps, r *Run, p RotateParams, renewer flavors.CertRenewer, name string) error {
	rep, err := d.Provider.Instances().Get(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	drained := rotateDrainedKey(name)
	v := renewVersionKey(name).Get(r)
	if v == "" {
		names, err := renewer.ExpiringCerts(ctx, rep, p.Within)
		if err != nil {
			return fmt.Errorf("the certificates of %s: %w", name, err)
		}
		if len(names) == 0 {
			return nil
		}
		if v, err = d.ReplicaVersion(ctx, rep); err != nil {
			return fmt.Errorf("the version of %s: %w", name, err)
		}
		r.Info("renewing the certificates of %s: %s expire within %s", name, strings.Join(names, ", "), p.Within)
		if err := renewVersionKey(name).Set(r, v); err != nil {
			return err
		}
	}
	if !renewedKey(name).IsSet(r) {
		if exists, err := takeOutForRotation(ctx, d, r, p, name); err != nil {
			return err
		} else if !exists {
			if rs, err := d.Provider.Instances().List(ctx); err == nil && len(rs) == 1 {
				r.Info("%s is the only master: its apiserver is unavailable while it restarts on the renewed certificates", name)
			}
		}
		r.Waiting("renewing the certificates of %s with its flavor's tool", name)
		rerr := renewer.RenewCerts(ctx, rep)
		if rerr == nil {
			rerr = healthGate(ctx, d, r, rep, v, p.HealthTimeout)
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return rerr // interrupted: a re-run finishes the renewal
			}
			return rollbackRenewal(ctx, d, r, p, renewer, rep, v, rerr)
		}
		if err := renewedKey(name).Mark(r); err != nil {
			return err
		}
	}
	if err := renewer.FinishUpgrade(ctx, rep); err != nil {
		return err
	}
	if drained.IsSet(r) {
		if err := undrain(ctx, d, r, name, p.HealthTimeout); err != nil {
			return err
		}
	}
	return drained.Clear(r)
}

// rollbackRenewal restores rep with the flavor's rollback, waits until it
// is healthy at version v and back in the LB, and concludes the run.
func rollbackRenewal(ctx context.Context, d *Deps, r *Run, p RotateParams, renewer flavors.CertRenewer, rep providers.Replica, v string, cause error) error {
	r.Info("renewing the certificates of %s failed: %v — restoring its previous certificates, kubeconfigs and manifests", rep.Name, cause)
	if err := renewer.RollbackMaster(ctx, rep, false); err != nil {
		return fmt.Errorf("renewing the certificates of %s failed (%v); restoring them failed too: %w", rep.Name, cause, err)
	}
	if err := healthGate(ctx, d, r, rep, v, RestoreHealthTimeout(p.HealthTimeout)); err != nil {
		return fmt.Errorf("renewing the certificates of %s failed (%v) and it is not healthy after its restore: %w", rep.Name, cause, err)
	}
	if rotateDrainedKey(rep.Name).IsSet(r) {
		if err := undrain(ctx, d, r, rep.Name, p.HealthTimeout); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: renewing the certificates of %s failed (%v); its previous certificates are restored and it serves again; the masters after it were not touched", ErrConcluded, rep.Name, cause)
}

// takeOutForRotation drains replica name for p.DrainGrace when the
// cluster has a load balancer (exists), journaling rotateDrainedKey
// first so that an interrupted run puts it back, and moves etcd
// leadership off it (drainMovingLeader).
func takeOutForRotation(ctx context.Context, d *Deps, r *Run, p RotateParams, name string) (exists bool, err error) {
	return drainMovingLeader(ctx, d, r, name, p.DrainGrace, func() error { return rotateDrainedKey(name).Mark(r) })
}

func rotateOne(ctx context.Context, d *Deps, r *Run, p RotateParams, issuer flavors.ReplicaCertIssuer, name string) error {
	inst := d.Provider.Instances()
	rep, err := inst.Get(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	want, err := clusterSANs(ctx, d, "")
	if err != nil {
		return err
	}
	drained := rotateDrainedKey(name)
	problem := certProblem(rep, want, p.Within, time.Now())
	if problem == "" {
		if drained.IsSet(r) { // rotated by an interrupted run
			if err := syncPKI(d, name, rep.Template); err != nil {
				return err
			}
			if err := undrain(ctx, d, r, name, p.HealthTimeout); err != nil {
				return err
			}
			return drained.Clear(r)
		}
		return nil
	}
	r.Info("renewing the certificates of %s: %s", name, problem)
	if lkgKey(name).Get(r) == "" {
		if _, err := recordLastKnownGood(d, r, name, rep.Template); err != nil {
			return err
		}
	}
	if _, err := takeOutForRotation(ctx, d, r, p, name); err != nil {
		return err
	}
	ca, err := d.CA()
	if err != nil {
		return err
	}
	files, err := issuer.IssueReplicaCertificates(ca, name, rep.Address, want)
	if err != nil {
		return fmt.Errorf("reissue the certificates of %s: %w", name, err)
	}
	tmpl := rep.Template.Clone()
	for f, b := range files {
		tmpl.Files[f] = b
	}
	up := UpgradeParams{Version: rep.Template.Version, HealthTimeout: p.HealthTimeout}
	r.Waiting("recreating %s with its new certificates", name)
	if _, err := inst.Recreate(ctx, name, tmpl); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return rollback(ctx, d, r, name, up, fmt.Errorf("recreate with new certificates: %w", err))
	}
	rep, err = inst.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := healthGate(ctx, d, r, rep, rep.Template.Version, p.HealthTimeout); err != nil {
		return rollback(ctx, d, r, name, up, fmt.Errorf("new certificates: %w", err))
	}
	// Only now do the new certificates and keys replace the old under pki/
	// (a rollback takes the old keys from there).
	if err := syncPKI(d, name, rep.Template); err != nil {
		return err
	}
	if drained.IsSet(r) {
		if err := undrain(ctx, d, r, name, p.HealthTimeout); err != nil {
			return err
		}
	}
	return drained.Clear(r)
}

// CertsNeedingRotation names the replicas whose apiserver certificate
// misses a SAN the cluster needs (with extraDNS added) or expires within
// `within`.
func CertsNeedingRotation(ctx context.Context, d *Deps, extraDNS string, within time.Duration) ([]string, error) {
	want, err := clusterSANs(ctx, d, extraDNS)
	if err != nil {
		return nil, err
	}
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rep := range rs {
		if certProblem(rep, want, within, time.Now()) != "" {
			out = append(out, rep.Name)
		}
	}
	return out, nil
}
