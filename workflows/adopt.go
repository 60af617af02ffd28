package workflows

import (
	"context"
	"fmt"
	"time"
)

// StepAdopt is the name of the step every mutating workflow runs first
// on a provider that can adopt another tool's master 0
// (providers.Adopter: kube-up's AWS master, which carries none of
// hamaster's tags).
const StepAdopt = "adopt"

// adopt is the adopt step: it runs before the cluster lock is taken,
// because the lock is reached through the masters, which the provider
// lists only once they are adopted; and outside the journal, because it
// is idempotent (adopting again, or nothing to adopt, changes nothing),
// so a journal of the previous release, which has no such step, resumes
// unchanged. It runs only when the operator has confirmed a change:
// never on a dry run, never for a read-only command.
func (d *Deps) adopt(ctx context.Context, sink Sink) error {
	a := d.ProviderCaps().Adopter
	if a == nil {
		return nil
	}
	start := time.Now()
	if err := a.Adopt(ctx); err != nil {
		return fmt.Errorf("%s: adopt the %s provider's master 0 of cluster %s: %w", StepAdopt, d.Provider.Name(), d.Cluster, err)
	}
	if sink != nil {
		sink.Event(Event{Step: StepAdopt, State: "info", ElapsedMS: time.Since(start).Milliseconds(),
			Message: fmt.Sprintf("%s: master 0 carries hamaster's tags (%.1fs)", StepAdopt, time.Since(start).Seconds())})
	}
	return nil
}
