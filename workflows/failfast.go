package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hamaster/hamaster/providers"
)

// failFastAfter is how long a replica must be seen failed (process gone,
// apiserver refused, etcd failed) before a gate stops waiting: long enough
// to ride out a status file written mid-restart, far below any timeout.
const failFastAfter = 1500 * time.Millisecond

// ReplicaFailedError is a health gate stopped early because the replica
// itself reported a failure waiting will not fix.
type ReplicaFailedError struct {
	Replica string
	Cause   string
}

func (e *ReplicaFailedError) Error() string {
	return fmt.Sprintf("replica %s failed: %s", e.Replica, e.Cause)
}

// failWatch tracks a replica's diagnosis across the polls of a gate.
type failWatch struct {
	inst  providers.Instances
	name  string
	since time.Time
	now   func() time.Time
}

// check returns a *ReplicaFailedError once the replica has been seen
// failed for failFastAfter; nil while it is not (or the provider cannot
// tell).
func (w *failWatch) check(ctx context.Context) error {
	dg, err := providers.Diagnose(ctx, w.inst, w.name)
	if err != nil || !dg.Failed {
		w.since = time.Time{}
		return nil
	}
	now := w.now()
	if w.since.IsZero() {
		w.since = now
	}
	if now.Sub(w.since) >= failFastAfter {
		return &ReplicaFailedError{Replica: w.name, Cause: dg.Cause}
	}
	return nil
}

// gateWithFailFast runs waitFor-style polling of check, stopping early
// with a *ReplicaFailedError when the replica reports a persistent failure.
func gateWithFailFast(ctx context.Context, d *Deps, r *Run, name, what string, check func(context.Context) error) error {
	w := &failWatch{inst: d.Provider.Instances(), name: name, now: time.Now}
	fctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	err := waitFor(fctx, r, what, 100*time.Millisecond, func(cctx context.Context) error {
		if ferr := w.check(cctx); ferr != nil {
			fail(ferr)
			return ferr
		}
		return check(cctx)
	})
	var rf *ReplicaFailedError
	if errors.As(context.Cause(fctx), &rf) {
		return rf
	}
	return err
}

// watchFailure returns a context that is cancelled, with a
// *ReplicaFailedError as its cause, once the replica reports a persistent
// failure; for waits that are not polls of ours (the LB's health checks,
// etcd catching up). failure returns that error, or nil.
func watchFailure(ctx context.Context, d *Deps, name string) (wctx context.Context, failure func() error, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		w := &failWatch{inst: d.Provider.Instances(), name: name, now: time.Now}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-tick.C:
				if err := w.check(wctx); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	failure = func() error {
		var rf *ReplicaFailedError
		if errors.As(context.Cause(wctx), &rf) {
			return rf
		}
		return nil
	}
	return wctx, failure, func() { close(done); cancel(nil) }
}
