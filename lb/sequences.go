package lb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// PollInterval is how often the sequences below look at the LB again.
const PollInterval = 100 * time.Millisecond

// Exists reports whether the LB exists.
func Exists(ctx context.Context, l LoadBalancer) (bool, error) {
	_, err := l.Get(ctx)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errkind.NotFound):
		return false, nil
	default:
		return false, fmt.Errorf("look up load balancer: %w", err)
	}
}

// Promote turns a single-replica cluster's static IP into a load balancer:
// free the IP from the replica that holds it, create the LB on that IP with
// that replica as its only target, and wait until the LB reports it healthy.
// Clients keep the same address; between the detach and the LB taking the
// address new connections are refused for a moment. Idempotent: an existing
// LB is only checked for the target.
func Promote(ctx context.Context, sip StaticIP, l LoadBalancer, first Target) error {
	exists, err := Exists(ctx, l)
	if err != nil {
		return err
	}
	if !exists {
		ip, _, err := sip.Get(ctx)
		if err != nil {
			return fmt.Errorf("promote static IP: %w", err)
		}
		if pr, ok := l.(Preparer); ok {
			if err := pr.Prepare(ctx, []Target{first}); err != nil {
				return fmt.Errorf("promote static IP %s: prepare load balancer: %w", ip, err)
			}
		}
		if !ownsAddress(l) { // an LB with its own address leaves the IP where it is
			if err := sip.Detach(ctx); err != nil {
				return fmt.Errorf("promote static IP %s: detach: %w", ip, err)
			}
		}
		if err := l.Create(ctx, ip, []Target{first}); err != nil {
			return fmt.Errorf("promote static IP %s: create load balancer: %w", ip, err)
		}
	} else if err := l.AddTarget(ctx, first); err != nil {
		return fmt.Errorf("promote static IP: add %s: %w", first.Name, err)
	}
	return WaitHealthy(ctx, l, first.Name)
}

// Demote reverses Promote when one replica is left: delete the LB and
// attach the static IP to that replica again. Idempotent.
// With a Releaser only the IP binding goes before the attach, the rest
// of the LB after it, which shortens the window in which the IP answers
// nowhere.
func Demote(ctx context.Context, sip StaticIP, l LoadBalancer, last string) error {
	if r, ok := l.(Releaser); ok {
		if err := r.Release(ctx); err != nil {
			return fmt.Errorf("demote: release the static IP from the load balancer: %w", err)
		}
		if ownsAddress(l) {
			// The static IP stayed on a replica, maybe not the last one:
			// move it (clients use the name, released above).
			if _, holder, err := sip.Get(ctx); err != nil {
				return fmt.Errorf("demote: %w", err)
			} else if holder != "" && holder != last {
				if err := sip.Detach(ctx); err != nil {
					return fmt.Errorf("demote: detach static IP from %s: %w", holder, err)
				}
			}
		}
		if err := sip.Attach(ctx, last); err != nil {
			return fmt.Errorf("demote: attach static IP to %s: %w", last, err)
		}
	}
	if err := l.Delete(ctx); err != nil {
		return fmt.Errorf("demote: delete load balancer: %w", err)
	}
	if err := sip.Attach(ctx, last); err != nil {
		return fmt.Errorf("demote: attach static IP to %s: %w", last, err)
	}
	return nil
}

// Drain stops new connections to a target, then waits grace so that
// clients finish what they were doing before the replica is touched
// (the LB's health checks also notice in that time), and ends the drain
// (FinishDrain).
func Drain(ctx context.Context, l LoadBalancer, name string, grace time.Duration) error {
	if err := l.DrainTarget(ctx, name); err != nil {
		return fmt.Errorf("drain %s: %w", name, err)
	}
	return FinishDrain(ctx, l, name, grace)
}

// FinishDrain waits what is left of a drained target's grace period,
// then has an LB that lets open connections outlive a drain
// (SessionEnder) close them.
func FinishDrain(ctx context.Context, l LoadBalancer, name string, left time.Duration) error {
	if left > 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("drain %s: grace period: %w", name, ctx.Err())
		}
	}
	if se, ok := l.(SessionEnder); ok {
		if err := se.EndSessions(ctx, name); err != nil {
			return fmt.Errorf("drain %s: end the connections left after the grace period: %w", name, err)
		}
	}
	return nil
}

// WaitHealthy polls the LB until it reports the target healthy and not
// draining, or ctx ends; the error then names the last reason seen.
func WaitHealthy(ctx context.Context, l LoadBalancer, name string) error {
	return WaitHealthyObserved(ctx, l, name, nil)
}

// WaitHealthyObserved is WaitHealthy telling observe, when not nil, the
// target's state after every poll ("unhealthy: <reason>", "draining").
func WaitHealthyObserved(ctx context.Context, l LoadBalancer, name string, observe func(state string)) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	last := "not registered"
	for {
		st, err := l.Get(ctx)
		if err == nil {
			last = "not registered"
			for _, t := range st.Targets {
				if t.Name != name {
					continue
				}
				if t.Healthy && !t.Draining {
					return nil
				}
				last = "unhealthy"
				if t.Draining {
					last = "draining"
				}
				if t.Reason != "" {
					last += ": " + t.Reason
				}
			}
		} else {
			last = err.Error()
		}
		if observe != nil {
			observe(name + ": " + last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait until the load balancer sees %s healthy (last: %s): %w", name, last, ctx.Err())
		case <-tick.C:
		}
	}
}
