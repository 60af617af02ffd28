package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// loadBalancer implements lb.LoadBalancer with a hamaster-node lb process
// bound to the static IP; its config file is the LB's desired state.
type loadBalancer struct{ p *Provider }

func (p *Provider) lbProc() proc {
	return proc{pidFile: p.l.lbPID(), marker: p.l.lbConfig()}
}

func (b *loadBalancer) readConfig() (lbproxy.Config, bool, error) {
	cfg, err := lbproxy.LoadConfig(b.p.l.lbConfig())
	if errors.Is(err, os.ErrNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return cfg, false, fmt.Errorf("read load balancer config: %w", err)
	}
	return cfg, true, nil
}

// Get implements lb.LoadBalancer. A configured LB whose process is down is
// reported with every target unhealthy.
func (b *loadBalancer) Get(_ context.Context) (lb.Status, error) {
	cfg, ok, err := b.readConfig()
	if err != nil {
		return lb.Status{}, err
	}
	if !ok {
		return lb.Status{}, errkind.Errorf(errkind.NotFound, "cluster %s has no load balancer", b.p.cluster)
	}
	st := lb.Status{IP: b.p.info.StaticIP}
	var health map[string]lbproxy.TargetStatus
	running := b.p.lbProc().pid() != 0
	if running {
		if s, err := lbproxy.ReadStatus(b.p.l.lbStatus()); err == nil {
			health = map[string]lbproxy.TargetStatus{}
			for _, t := range s.Targets {
				health[t.Name] = t
			}
		}
	}
	for _, t := range cfg.Targets {
		th := lb.TargetHealth{Name: t.Name, Address: t.Address, Draining: t.Draining}
		switch h, seen := health[t.Name]; {
		case !running:
			th.Reason = "load balancer process not running"
		case !seen:
			th.Reason = "not checked yet"
		default:
			th.Healthy = h.Healthy
			th.Reason = h.LastError
		}
		st.Targets = append(st.Targets, th)
	}
	return st, nil
}

func (b *loadBalancer) target(t lb.Target) lbproxy.Target {
	addr := t.Address
	if addr == "" {
		addr = t.Name
	}
	return lbproxy.Target{Name: t.Name, Address: net.JoinHostPort(addr, strconv.Itoa(providers.APIServerPort))}
}

// Create implements lb.LoadBalancer.
func (b *loadBalancer) Create(ctx context.Context, ip string, targets []lb.Target) error {
	if ip != b.p.info.StaticIP {
		return errkind.Errorf(errkind.InvalidArgument, "load balancer IP %s is not the cluster's static IP %s", ip, b.p.info.StaticIP)
	}
	cfg, ok, err := b.readConfig()
	if err != nil {
		return err
	}
	if err := b.p.ensureNetwork(); err != nil {
		return err
	}
	if !ok {
		health, err := b.p.lbHealth()
		if err != nil {
			return err
		}
		noRetry, err := b.p.lbNoDialRetry()
		if err != nil {
			return err
		}
		cfg = lbproxy.Config{
			Listen:      net.JoinHostPort(ip, strconv.Itoa(providers.APIServerPort)),
			Health:      health,
			NoDialRetry: noRetry,
			StatusFile:  b.p.l.lbStatus(),
			PIDFile:     b.p.l.lbPID(),
		}
	}
	for _, t := range targets {
		cfg.Targets = upsertTarget(cfg.Targets, b.target(t))
	}
	if err := os.MkdirAll(b.p.l.lb(), 0o700); err != nil {
		return fmt.Errorf("state dir not writable: %w", err)
	}
	if err := lbproxy.WriteConfig(b.p.l.lbConfig(), cfg); err != nil {
		return err
	}
	if b.p.lbProc().pid() == 0 {
		if err := b.p.waitModelled(ctx, OptLBProvisionDelay, "load balancer provisioning"); err != nil {
			return err
		}
		bin, err := b.p.nodeBinary()
		if err != nil {
			return err
		}
		_ = os.Remove(b.p.l.lbStatus())
		proc, err := start(bin, []string{"lb", "--config", b.p.l.lbConfig()}, b.p.l.lbLog(), b.p.l.lbPID())
		if err != nil {
			return err
		}
		return poll(ctx, "the load balancer to bind "+cfg.Listen, func() (bool, error) {
			if why := proc.ExitReason(); why != "" {
				return false, fmt.Errorf("load balancer (pid %d) exited at start (%s); last log lines:\n%s%s", proc.Pid(), why, proc.Tail(10), hint(ip))
			}
			s, err := lbproxy.ReadStatus(b.p.l.lbStatus())
			return err == nil && s.Serving, nil
		})
	}
	b.p.lbProc().signal(syscall.SIGHUP)
	return nil
}

func upsertTarget(ts []lbproxy.Target, t lbproxy.Target) []lbproxy.Target {
	for i := range ts {
		if ts[i].Name == t.Name {
			ts[i].Address = t.Address
			ts[i].Draining = false
			return ts
		}
	}
	return append(ts, t)
}

// update applies f to the config of an existing LB and tells the process.
func (b *loadBalancer) update(f func(*lbproxy.Config) bool) error {
	cfg, ok, err := b.readConfig()
	if err != nil {
		return err
	}
	if !ok {
		return errkind.Errorf(errkind.NotFound, "cluster %s has no load balancer", b.p.cluster)
	}
	if !f(&cfg) {
		return nil
	}
	if err := lbproxy.WriteConfig(b.p.l.lbConfig(), cfg); err != nil {
		return err
	}
	b.p.lbProc().signal(syscall.SIGHUP)
	return nil
}

// AddTarget implements lb.LoadBalancer.
func (b *loadBalancer) AddTarget(_ context.Context, t lb.Target) error {
	return b.update(func(c *lbproxy.Config) bool {
		c.Targets = upsertTarget(c.Targets, b.target(t))
		return true
	})
}

// DrainTarget implements lb.LoadBalancer.
func (b *loadBalancer) DrainTarget(_ context.Context, name string) error {
	err := b.update(func(c *lbproxy.Config) bool {
		for i := range c.Targets {
			if c.Targets[i].Name == name && !c.Targets[i].Draining {
				c.Targets[i].Draining = true
				return true
			}
		}
		return false
	})
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	return err
}

// RemoveTarget implements lb.LoadBalancer.
func (b *loadBalancer) RemoveTarget(_ context.Context, name string) error {
	err := b.update(func(c *lbproxy.Config) bool {
		for i := range c.Targets {
			if c.Targets[i].Name == name {
				c.Targets = append(c.Targets[:i], c.Targets[i+1:]...)
				return true
			}
		}
		return false
	})
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	return err
}

// Delete implements lb.LoadBalancer: stop the process (which frees the
// static IP) and remove its state.
func (b *loadBalancer) Delete(ctx context.Context) error {
	if err := b.p.lbProc().stop(ctx, 10*time.Second); err != nil {
		return fmt.Errorf("delete load balancer: %w", err)
	}
	if err := os.RemoveAll(b.p.l.lb()); err != nil {
		return fmt.Errorf("delete load balancer state: %w", err)
	}
	return nil
}
