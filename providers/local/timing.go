package local

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/errkind"
)

// Opt-in timing options (providers.Settings.Options). Left unset, the local
// provider keeps its instant behaviour: replicas start at once and the LB
// checks every 100ms. The benchmark sets them from a cloud timing profile
// so that a local cluster behaves, in time, like one on GCE or AWS.
const (
	// OptBootDelay is how long a created or recreated replica stays down
	// before its process starts, as a VM does while it is (re)provisioned
	// and boots (a Go duration, e.g. "45s").
	OptBootDelay = "boot-delay"
	// OptLBHealthInterval is the LB's health check interval.
	OptLBHealthInterval = "lb-health-interval"
	// OptLBHealthTimeout is the timeout of one LB health check.
	OptLBHealthTimeout = "lb-health-timeout"
	// OptLBHealthyThreshold is how many consecutive passing checks make a
	// target healthy.
	OptLBHealthyThreshold = "lb-healthy-threshold"
	// OptLBUnhealthyThreshold is how many consecutive failing checks make a
	// target unhealthy; until then the LB keeps sending new connections to
	// it, as a cloud LB does.
	OptLBUnhealthyThreshold = "lb-unhealthy-threshold"
	// OptLBNoDialRetry ("true") makes the LB pass-through as a cloud's
	// network LB is: a connection sent to a target that refuses it fails,
	// instead of being tried on another target (lbproxy.Config.NoDialRetry).
	OptLBNoDialRetry = "lb-no-dial-retry"
	// OptLBProvisionDelay is how long a new load balancer takes to be
	// provisioned before it forwards anything (an NLB's "provisioning"
	// state before "active").
	OptLBProvisionDelay = "lb-provision-delay"
)

// lbNoDialRetry reads OptLBNoDialRetry.
func (p *Provider) lbNoDialRetry() (bool, error) {
	v := p.opts[OptLBNoDialRetry]
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errkind.Errorf(errkind.InvalidArgument, "option %s: %q must be true or false", OptLBNoDialRetry, v)
	}
	return b, nil
}

// instantHealth is the LB health configuration without timing options.
func (p *Provider) instantHealth() lbproxy.HealthConfig {
	return lbproxy.HealthConfig{
		Path: "/readyz", Interval: lbproxy.Duration{Duration: 100 * time.Millisecond}, Timeout: lbproxy.Duration{Duration: time.Second},
		HealthyThreshold: 1, UnhealthyThreshold: 2, CAFile: p.caFile(),
	}
}

// lbHealth is the LB health configuration: instantHealth overridden by the
// timing options that are set.
func (p *Provider) lbHealth() (lbproxy.HealthConfig, error) {
	h := p.instantHealth()
	for _, o := range []struct {
		key string
		dst *time.Duration
	}{{OptLBHealthInterval, &h.Interval.Duration}, {OptLBHealthTimeout, &h.Timeout.Duration}} {
		if d, ok, err := p.durationOpt(o.key); err != nil {
			return h, err
		} else if ok {
			*o.dst = d
		}
	}
	for _, o := range []struct {
		key string
		dst *int
	}{{OptLBHealthyThreshold, &h.HealthyThreshold}, {OptLBUnhealthyThreshold, &h.UnhealthyThreshold}} {
		if v := p.opts[o.key]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return h, errkind.Errorf(errkind.InvalidArgument, "option %s: %q must be a whole number of at least 1", o.key, v)
			}
			*o.dst = n
		}
	}
	return h, nil
}

// durationOpt reads a positive duration option.
func (p *Provider) durationOpt(key string) (time.Duration, bool, error) {
	v := p.opts[key]
	if v == "" {
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, false, errkind.Errorf(errkind.InvalidArgument, "option %s: %q must be a non-negative Go duration such as \"45s\"", key, v)
	}
	return d, true, nil
}

// validateTiming checks every timing option up front, so a bad one is
// refused before anything changes.
func (p *Provider) validateTiming() error {
	for _, k := range []string{OptBootDelay, OptLBProvisionDelay} {
		if _, _, err := p.durationOpt(k); err != nil {
			return err
		}
	}
	if _, err := p.lbHealth(); err != nil {
		return err
	}
	_, err := p.lbNoDialRetry()
	return err
}

// waitBoot models the time a VM takes to be (re)provisioned and boot: it
// waits OptBootDelay (none when unset), or until ctx ends.
func (p *Provider) waitBoot(ctx context.Context, name string) error {
	return p.waitModelled(ctx, OptBootDelay, "replica "+name+": boot delay")
}

// waitModelled waits the duration of option key (none when unset), or
// until ctx ends.
func (p *Provider) waitModelled(ctx context.Context, key, what string) error {
	d, ok, err := p.durationOpt(key)
	if err != nil || !ok || d == 0 {
		return err
	}
	p.log.DebugContext(ctx, "modelled cloud delay", "what", what, "delay", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case <-t.C:
		return nil
	}
}
