// Package lb is the load-balancer seam: the interface a provider implements
// for its L4 load balancer and the cluster's static IP, and the cloud-neutral
// sequences built on it (promote the static IP to an LB, demote it back,
// drain a target, wait until healthy).
//
// Contract: every method waits for the cloud's long-running operation
// before returning; mutating methods are idempotent; Get on a missing LB
// returns errkind.NotFound; Delete and RemoveTarget treat absent as success.
package lb

import (
	"context"
	"strings"
)

// Target is one apiserver behind the LB, named by its replica.
type Target struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// TargetHealth is the LB's own view of a target.
type TargetHealth struct {
	Name     string `json:"name"`
	Address  string `json:"address,omitempty"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Status describes an existing load balancer.
type Status struct {
	// IP is the address clients use: the cluster's static IP.
	IP      string         `json:"ip"`
	Targets []TargetHealth `json:"targets"`
	// Holder is the machine holding IP when the LB is a VIP that moves
	// between the masters (metal: keepalived), "" otherwise or when none
	// holds it (several, comma-separated, in a split brain).
	Holder string `json:"holder,omitempty"`
	// Viewer is the machine whose view Targets are when each master runs
	// its own balancer (metal: the holder's HAProxy), "" for a cloud's.
	Viewer string `json:"viewer,omitempty"`
}

// Holders lists the machines holding IP (Holder, split at its commas):
// more than one is a split brain, two masters answering for the VIP.
func (s Status) Holders() []string {
	if s.Holder == "" {
		return nil
	}
	return strings.Split(s.Holder, ",")
}

// LoadBalancer is an L4 (TCP) load balancer on the cluster's static IP that
// health-checks each apiserver's /readyz over HTTPS and forwards only to
// healthy targets.
type LoadBalancer interface {
	// Get returns the LB's status or errkind.NotFound when there is none.
	Get(ctx context.Context) (Status, error)
	// Create creates the LB on ip with targets and returns once it forwards
	// (or errs). The static IP must already be detached from any replica.
	// Existing LB: targets are reconciled to at least those given.
	Create(ctx context.Context, ip string, targets []Target) error
	// AddTarget registers a target (or takes it out of draining).
	AddTarget(ctx context.Context, t Target) error
	// DrainTarget stops new connections to a target; open connections go
	// on. Missing target: success.
	DrainTarget(ctx context.Context, name string) error
	// RemoveTarget deregisters a target. Missing target: success.
	RemoveTarget(ctx context.Context, name string) error
	// Delete deletes the LB and everything it created (health checks,
	// groups, listeners), leaving the static IP reserved but unattached.
	Delete(ctx context.Context) error
}

// CreateChecker is a LoadBalancer that can tell, before anything changes,
// that Create on ip with targets would give a reachable endpoint (metal:
// the VIP inside the masters' subnet, free, and VRRP between the
// targets). The first add-replica's preflight asks it with the master it
// clones and the replica it adds, whose Address is empty (not known yet:
// the provider finds it).
type CreateChecker interface {
	CheckCreate(ctx context.Context, ip string, targets []Target) error
}

// StaticIP is the cluster's reserved public address.
type StaticIP interface {
	// Get returns the address and the replica it is attached to ("" when
	// unattached or owned by the LB).
	Get(ctx context.Context) (ip string, attachedTo string, err error)
	// Attach attaches the address to a replica (a no-op if already there).
	Attach(ctx context.Context, replica string) error
	// Detach frees the address from whatever replica holds it and waits
	// until that replica no longer answers on it.
	Detach(ctx context.Context) error
}

// HeldByLB is an optional capability of a StaticIP whose address nothing
// but the load balancer ever holds (metal: keepalived on the masters is
// the load balancer): with no LB nothing answers on it, and a single
// master's clients reach it at its own address.
type HeldByLB interface {
	HeldByLB() bool
}

// HeldOnlyByLB reports whether s's address is served only by the LB.
func HeldOnlyByLB(s StaticIP) bool {
	h, ok := s.(HeldByLB)
	return ok && h.HeldByLB()
}

// Preparer is an optional capability of a LoadBalancer: build everything
// the LB needs except taking the static IP (health check, groups, backend
// service, registered targets), so that during promotion the window in
// which the static IP answers nowhere — between detaching it from the
// replica and the LB serving on it — holds only the final binding. Prepare
// is idempotent; Create after Prepare finishes the LB; Delete removes what
// Prepare built even when Create never ran.
type Preparer interface {
	Prepare(ctx context.Context, targets []Target) error
}

// OwnAddress is an optional capability of a LoadBalancer: when OwnAddress
// reports true the LB serves on addresses of its own and clients find it
// by name (AWS with the Route53 endpoint: the name becomes an alias to the
// NLB), so it never takes the static IP. Promote then leaves the static IP
// on its replica (no outage), Status.IP is the LB's own address, and
// Create's ip is only the cluster's endpoint for reference.
type OwnAddress interface {
	OwnAddress() bool
}

// ownsAddress reports whether l serves on addresses of its own.
func ownsAddress(l LoadBalancer) bool {
	o, ok := l.(OwnAddress)
	return ok && o.OwnAddress()
}

// PromotionNoter is an optional capability of a LoadBalancer: it says
// what promoting the static IP to it costs the clients of that address
// (how long it answers nowhere, and why), for --dry-run and the docs.
type PromotionNoter interface {
	PromotionNote() string
}

// SessionEnder is an optional capability of a LoadBalancer whose drain
// leaves open connections to go on for as long as they last (HAProxy in
// TCP mode): EndSessions closes the connections still open to a drained
// target, as a cloud LB does when its connection-draining timeout (GCE)
// or deregistration delay (AWS) ends. Drain calls it once the grace
// period is over, before the target is touched, so that clients on
// kept-alive connections reconnect to another target instead of being
// answered by a master whose etcd or apiserver is being replaced.
type SessionEnder interface {
	EndSessions(ctx context.Context, name string) error
}

// Releaser is an optional capability of a LoadBalancer: give up the static
// IP (delete only what binds it, e.g. the forwarding rule) and leave the
// rest for Delete, so that demotion can attach the IP to the last replica
// before the slower clean-up. Release is idempotent.
type Releaser interface {
	Release(ctx context.Context) error
}
