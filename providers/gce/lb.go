package gce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
)

// loadBalancer implements lb.LoadBalancer as an external passthrough
// Network Load Balancer: regional HTTPS health check on /readyz, one
// unmanaged instance group per zone, a regional backend service (TCP,
// EXTERNAL, connection draining) and a forwarding rule on the static IP.
//
// Draining: DrainTarget labels the instance hamaster-lb=draining, then
// removes it from its instance group. Removing an instance from a backend's
// group is how GCE drains: the backend service's connection draining keeps
// established connections for drainingTimeoutSec while no new ones are
// sent. The label is how Get still reports the target (as draining) and
// AddTarget clears it.
type loadBalancer struct{ p *Provider }

// Get implements lb.LoadBalancer.
func (b *loadBalancer) Get(ctx context.Context) (lb.Status, error) {
	p := b.p
	var fr *computepb.ForwardingRule
	err := retry(ctx, "get forwarding rule "+p.frName(), func(ctx context.Context) error {
		var err error
		fr, err = p.rules.Get(ctx, &computepb.GetForwardingRuleRequest{Project: p.project, Region: p.region, ForwardingRule: p.frName()})
		return err
	})
	if errors.Is(err, errkind.NotFound) {
		return lb.Status{}, errkind.Errorf(errkind.NotFound, "cluster %s has no load balancer (forwarding rule %s)", p.cluster, p.frName())
	}
	if err != nil {
		return lb.Status{}, err
	}
	st := lb.Status{IP: fr.GetIPAddress()}
	raw, err := p.inst.listRaw(ctx)
	if err != nil {
		return lb.Status{}, err
	}
	byLink := map[string]*computepb.Instance{}
	for _, x := range raw {
		byLink[relLink(x.GetSelfLink())] = x
	}
	seen := map[string]bool{}
	for _, z := range p.zones {
		var h *computepb.BackendServiceGroupHealth
		err := retry(ctx, "get backend health in "+z, func(ctx context.Context) error {
			var err error
			h, err = p.backends.GetHealth(ctx, &computepb.GetHealthRegionBackendServiceRequest{Project: p.project, Region: p.region, BackendService: p.bsName(),
				ResourceGroupReferenceResource: &computepb.ResourceGroupReference{Group: proto.String(p.zoneLink(z, "instanceGroups", p.groupName(z)))}})
			return err
		})
		if errors.Is(err, errkind.NotFound) {
			continue
		}
		if err != nil {
			return lb.Status{}, err
		}
		for _, hs := range h.GetHealthStatus() {
			name := lastSeg(hs.GetInstance())
			if seen[name] {
				continue
			}
			seen[name] = true
			th := lb.TargetHealth{Name: name, Address: hs.GetIpAddress(), Healthy: hs.GetHealthState() == "HEALTHY"}
			if !th.Healthy {
				th.Reason = "health check: " + hs.GetHealthState()
			}
			st.Targets = append(st.Targets, th)
		}
	}
	for _, x := range byLink {
		if x.GetLabels()[LabelLB] == "draining" && !seen[x.GetName()] {
			addr := ""
			if nics := x.GetNetworkInterfaces(); len(nics) > 0 {
				addr = nics[0].GetNetworkIP()
			}
			st.Targets = append(st.Targets, lb.TargetHealth{Name: x.GetName(), Address: addr, Draining: true, Reason: "removed from its instance group (connection draining)"})
		}
	}
	sort.Slice(st.Targets, func(i, j int) bool { return st.Targets[i].Name < st.Targets[j].Name })
	return st, nil
}

// Create implements lb.LoadBalancer: every piece is created if missing
// (409 is success), so a re-run after a crash converges. The forwarding
// rule on the static IP comes last.
func (b *loadBalancer) Create(ctx context.Context, ip string, targets []lb.Target) error {
	p := b.p
	sip, _, err := p.staticAddress(ctx)
	if err != nil {
		return err
	}
	if ip != sip {
		return errkind.Errorf(errkind.InvalidArgument, "load balancer IP %s is not the cluster's static IP %s", ip, sip)
	}
	if err := b.Prepare(ctx, targets); err != nil {
		return err
	}
	return b.create(ctx, "create forwarding rule "+p.frName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.rules.Insert(ctx, &computepb.InsertForwardingRuleRequest{Project: p.project, Region: p.region, RequestId: rid, ForwardingRuleResource: &computepb.ForwardingRule{
			Name: proto.String(p.frName()), Description: b.desc(), IPAddress: proto.String(ip), IPProtocol: proto.String("TCP"),
			Ports: []string{strconv.Itoa(p.apiPort)}, LoadBalancingScheme: proto.String("EXTERNAL"),
			BackendService: proto.String(p.regionLink("backendServices", p.bsName())), Labels: p.labels(),
		}})
	})
}

func (b *loadBalancer) desc() *string {
	return proto.String(fmt.Sprintf("hamaster cluster %s: apiserver load balancer", b.p.cluster))
}

// create runs an insert whose 409 is success.
func (b *loadBalancer) create(ctx context.Context, what string, call func(ctx context.Context, rid *string) (*compute.Operation, error)) error {
	return ignore(b.p.mutate(ctx, what, call), errkind.AlreadyExists)
}

// Prepare implements lb.Preparer: health check, one instance group per
// zone with the targets, and the backend service — everything but the
// forwarding rule that takes the static IP — so promotion detaches the IP
// from master 0 only when a single insert is left.
func (b *loadBalancer) Prepare(ctx context.Context, targets []lb.Target) error {
	p := b.p
	desc := b.desc()
	create := func(what string, call func(ctx context.Context, rid *string) (*compute.Operation, error)) error {
		return b.create(ctx, what, call)
	}
	if err := b.ensureFirewall(ctx, targets); err != nil {
		return err
	}
	if err := create("create health check "+p.hcName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.hcs.Insert(ctx, &computepb.InsertRegionHealthCheckRequest{Project: p.project, Region: p.region, RequestId: rid, HealthCheckResource: &computepb.HealthCheck{
			Name: proto.String(p.hcName()), Description: desc, Type: proto.String("HTTPS"),
			HttpsHealthCheck: &computepb.HTTPSHealthCheck{Port: proto.Int32(int32(p.apiPort)), RequestPath: proto.String("/readyz")},
			CheckIntervalSec: proto.Int32(2), TimeoutSec: proto.Int32(2), HealthyThreshold: proto.Int32(1), UnhealthyThreshold: proto.Int32(2),
		}})
	}); err != nil {
		return err
	}
	var backends []*computepb.Backend
	for _, z := range p.zones {
		if err := create("create instance group "+p.groupName(z), func(ctx context.Context, rid *string) (*compute.Operation, error) {
			return p.groups.Insert(ctx, &computepb.InsertInstanceGroupRequest{Project: p.project, Zone: z, RequestId: rid, InstanceGroupResource: &computepb.InstanceGroup{
				Name: proto.String(p.groupName(z)), Description: desc, Network: proto.String(p.network)}})
		}); err != nil {
			return err
		}
		backends = append(backends, &computepb.Backend{Group: proto.String(p.zoneLink(z, "instanceGroups", p.groupName(z))), BalancingMode: proto.String("CONNECTION")})
	}
	for _, t := range targets {
		if err := b.AddTarget(ctx, t); err != nil {
			return err
		}
	}
	if err := create("create backend service "+p.bsName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.backends.Insert(ctx, &computepb.InsertRegionBackendServiceRequest{Project: p.project, Region: p.region, RequestId: rid, BackendServiceResource: &computepb.BackendService{
			Name: proto.String(p.bsName()), Description: desc, LoadBalancingScheme: proto.String("EXTERNAL"), Protocol: proto.String("TCP"),
			HealthChecks:       []string{p.regionLink("healthChecks", p.hcName())},
			Backends:           backends,
			ConnectionDraining: &computepb.ConnectionDraining{DrainingTimeoutSec: proto.Int32(p.drainSeconds())},
		}})
	}); err != nil {
		return err
	}
	return nil
}

// setLBLabel sets or clears (value "") the instance's hamaster-lb label.
func (b *loadBalancer) setLBLabel(ctx context.Context, x *computepb.Instance, zone, value string) error {
	if x.GetLabels()[LabelLB] == value {
		return nil
	}
	labels := map[string]string{}
	for k, v := range x.GetLabels() {
		labels[k] = v
	}
	if value == "" {
		delete(labels, LabelLB)
	} else {
		labels[LabelLB] = value
	}
	return b.p.mutate(ctx, "label "+x.GetName()+" "+LabelLB+"="+value, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return b.p.instances.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{Project: b.p.project, Zone: zone, Instance: x.GetName(), RequestId: rid,
			InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{Labels: labels, LabelFingerprint: x.LabelFingerprint}})
	})
}

// members changes the instance's membership in its zone's group; "already
// a member" / "not a member" are success.
func (b *loadBalancer) members(ctx context.Context, name, zone string, add bool) error {
	p := b.p
	ref := []*computepb.InstanceReference{{Instance: proto.String(p.zoneLink(zone, "instances", name))}}
	var err error
	if add {
		err = p.mutate(ctx, "add "+name+" to "+p.groupName(zone), func(ctx context.Context, rid *string) (*compute.Operation, error) {
			return p.groups.AddInstances(ctx, &computepb.AddInstancesInstanceGroupRequest{Project: p.project, Zone: zone, InstanceGroup: p.groupName(zone), RequestId: rid,
				InstanceGroupsAddInstancesRequestResource: &computepb.InstanceGroupsAddInstancesRequest{Instances: ref}})
		})
		if reasonOf(err) == "memberAlreadyExists" {
			return nil
		}
	} else {
		err = p.mutate(ctx, "remove "+name+" from "+p.groupName(zone), func(ctx context.Context, rid *string) (*compute.Operation, error) {
			return p.groups.RemoveInstances(ctx, &computepb.RemoveInstancesInstanceGroupRequest{Project: p.project, Zone: zone, InstanceGroup: p.groupName(zone), RequestId: rid,
				InstanceGroupsRemoveInstancesRequestResource: &computepb.InstanceGroupsRemoveInstancesRequest{Instances: ref}})
		})
		if reasonOf(err) == "memberNotFound" || errors.Is(err, errkind.NotFound) {
			return nil
		}
	}
	return err
}

// AddTarget implements lb.LoadBalancer (also ends draining).
func (b *loadBalancer) AddTarget(ctx context.Context, t lb.Target) error {
	x, zone, err := b.p.inst.getRaw(ctx, t.Name)
	if err != nil {
		return err
	}
	if err := b.members(ctx, t.Name, zone, true); err != nil {
		return err
	}
	return b.setLBLabel(ctx, x, zone, "")
}

// DrainTarget implements lb.LoadBalancer.
func (b *loadBalancer) DrainTarget(ctx context.Context, name string) error {
	if exists, err := lb.Exists(ctx, b); err != nil || !exists {
		return err
	}
	x, zone, err := b.p.inst.getRaw(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.setLBLabel(ctx, x, zone, "draining"); err != nil {
		return err
	}
	return b.members(ctx, name, zone, false)
}

// RemoveTarget implements lb.LoadBalancer.
func (b *loadBalancer) RemoveTarget(ctx context.Context, name string) error {
	x, zone, err := b.p.inst.getRaw(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.members(ctx, name, zone, false); err != nil {
		return err
	}
	return b.setLBLabel(ctx, x, zone, "")
}

// Release implements lb.Releaser: delete the forwarding rule, which frees
// the static IP; absent is success.
func (b *loadBalancer) Release(ctx context.Context) error {
	p := b.p
	return ignore(p.mutate(ctx, "delete forwarding rule "+p.frName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.rules.Delete(ctx, &computepb.DeleteForwardingRuleRequest{Project: p.project, Region: p.region, ForwardingRule: p.frName(), RequestId: rid})
	}), errkind.NotFound)
}

// Delete implements lb.LoadBalancer: forwarding rule, backend service,
// groups, health check (each absent is success), and draining labels;
// the static address stays reserved.
func (b *loadBalancer) Delete(ctx context.Context) error {
	p := b.p
	del := func(what string, call func(ctx context.Context, rid *string) (*compute.Operation, error)) error {
		return ignore(p.mutate(ctx, what, call), errkind.NotFound)
	}
	if err := b.Release(ctx); err != nil {
		return err
	}
	if err := del("delete backend service "+p.bsName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.backends.Delete(ctx, &computepb.DeleteRegionBackendServiceRequest{Project: p.project, Region: p.region, BackendService: p.bsName(), RequestId: rid})
	}); err != nil {
		return err
	}
	for _, z := range p.zones {
		if err := del("delete instance group "+p.groupName(z), func(ctx context.Context, rid *string) (*compute.Operation, error) {
			return p.groups.Delete(ctx, &computepb.DeleteInstanceGroupRequest{Project: p.project, Zone: z, InstanceGroup: p.groupName(z), RequestId: rid})
		}); err != nil {
			return err
		}
	}
	if err := del("delete health check "+p.hcName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.hcs.Delete(ctx, &computepb.DeleteRegionHealthCheckRequest{Project: p.project, Region: p.region, HealthCheck: p.hcName(), RequestId: rid})
	}); err != nil {
		return err
	}
	if err := del("delete firewall rule "+p.fwName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: p.project, Firewall: p.fwName(), RequestId: rid})
	}); err != nil {
		return err
	}
	raw, err := p.inst.listRaw(ctx)
	if err != nil {
		return err
	}
	for _, x := range raw {
		if err := b.setLBLabel(ctx, x, lastSeg(x.GetZone()), ""); err != nil {
			return err
		}
	}
	return nil
}

// healthCheckRanges are the source ranges of Google Cloud health-check
// probes: 35.191.0.0/16 and 130.211.0.0/22 for regional health checks, and
// 209.85.152.0/22 and 209.85.204.0/22, which external passthrough Network
// Load Balancers' probes also come from ("Probe IP ranges and firewall
// rules", cloud.google.com/load-balancing/docs/health-check-concepts;
// "Firewall rules", cloud.google.com/load-balancing/docs/firewall-rules).
// kube-up's target-pool LB had no health check and needed none.
var healthCheckRanges = []string{"35.191.0.0/16", "130.211.0.0/22", "209.85.152.0/22", "209.85.204.0/22"}

// ensureFirewall creates the rule that lets health-check probes reach
// the masters on the apiserver port: without it the LB never sees a
// healthy backend. Its target tags are the targets' network tags (kube-up
// tags every master MASTER_TAG), its network theirs.
func (b *loadBalancer) ensureFirewall(ctx context.Context, targets []lb.Target) error {
	p := b.p
	var tags []string
	network := p.network
	for _, t := range targets {
		x, _, err := p.inst.getRaw(ctx, t.Name)
		if err != nil {
			return err
		}
		if len(x.GetTags().GetItems()) == 0 {
			return errkind.Errorf(errkind.FailedPrecondition, "master %s has no network tags: the firewall rule %s that lets health-check probes in targets the masters' tags (kube-up tags masters MASTER_TAG, e.g. kubernetes-master)", t.Name, p.fwName())
		}
		for _, tag := range x.GetTags().GetItems() {
			if !slices.Contains(tags, tag) {
				tags = append(tags, tag)
			}
		}
		if nics := x.GetNetworkInterfaces(); len(nics) > 0 && nics[0].GetNetwork() != "" {
			network = relLink(nics[0].GetNetwork())
		}
	}
	return b.create(ctx, "create firewall rule "+p.fwName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: p.project, RequestId: rid, FirewallResource: &computepb.Firewall{
			Name: proto.String(p.fwName()), Description: proto.String(fmt.Sprintf("hamaster cluster %s: Google Cloud health-check probes to the apiservers", p.cluster)),
			Network: proto.String(network), Direction: proto.String("INGRESS"), SourceRanges: healthCheckRanges, TargetTags: tags,
			Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{strconv.Itoa(p.apiPort)}}},
		}})
	})
}
