package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
)

// loadBalancer implements lb.LoadBalancer with an internet-facing Network
// Load Balancer named hm-<cluster> that owns the cluster's Elastic IP
// through its subnet mapping (SubnetMappings[].AllocationId: an NLB takes
// one Elastic IP per subnet, one subnet per zone, and subnets and subnet
// mappings cannot be mixed), a TCP listener on the apiserver port, and a
// target group hm-<cluster>-api of instance targets health-checked with
// HTTPS GET /readyz.
//
// Draining is deregistration: ELBv2 stops new connections at once and lets
// open ones finish for the target group's deregistration delay. ELBv2 keeps
// no per-target metadata, so a drained target is remembered as a tag
// hamaster.io/drained/<name> on the target group, and reported draining
// until AddTarget or RemoveTarget.
//
// Get serves a status at most the poll interval old (lb.WaitHealthy polls
// every 100 ms; AWS's Describe APIs are rate limited); every mutation
// invalidates it.
type loadBalancer struct {
	p *Provider

	mu          sync.Mutex
	tgARN       string
	cached      *lb.Status
	cachedAt    time.Time
	cachedError error
}

const healthCheckPath = "/readyz"

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// resourceName is an ELBv2 name (≤ 32 alphanumerics and hyphens).
func (p *Provider) resourceName(suffix string) string {
	base := "hm-" + strings.Trim(nameRE.ReplaceAllString(p.cluster, "-"), "-")
	if len(base)+len(suffix) <= 32 {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(p.cluster))
	h := hex.EncodeToString(sum[:])[:6]
	return strings.TrimRight(base[:32-len(suffix)-7], "-") + "-" + h + suffix
}

func (b *loadBalancer) lbName() string { return b.p.resourceName("") }
func (b *loadBalancer) tgName() string { return b.p.resourceName("-api") }

func (b *loadBalancer) invalidate() {
	b.mu.Lock()
	b.cached, b.cachedError = nil, nil
	b.mu.Unlock()
}

// findLB returns the LB's ARN or errkind.NotFound.
func (b *loadBalancer) findLB(ctx context.Context) (string, error) {
	out, err := b.p.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{b.lbName()}})
	if code(err) == "LoadBalancerNotFound" || err == nil && len(out.LoadBalancers) == 0 {
		return "", errkind.Errorf(errkind.NotFound, "cluster %s has no load balancer (%s)", b.p.cluster, b.lbName())
	}
	if err != nil {
		return "", mapErr(err, "describe load balancer %s", b.lbName())
	}
	return aws.ToString(out.LoadBalancers[0].LoadBalancerArn), nil
}

// findTG returns the target group's ARN or errkind.NotFound.
func (b *loadBalancer) findTG(ctx context.Context) (string, error) {
	b.mu.Lock()
	arn := b.tgARN
	b.mu.Unlock()
	if arn != "" {
		return arn, nil
	}
	out, err := b.p.elb.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{b.tgName()}})
	if code(err) == "TargetGroupNotFound" || err == nil && len(out.TargetGroups) == 0 {
		return "", errkind.Errorf(errkind.NotFound, "cluster %s has no target group (%s)", b.p.cluster, b.tgName())
	}
	if err != nil {
		return "", mapErr(err, "describe target group %s", b.tgName())
	}
	arn = aws.ToString(out.TargetGroups[0].TargetGroupArn)
	b.mu.Lock()
	b.tgARN = arn
	b.mu.Unlock()
	return arn, nil
}

func (b *loadBalancer) forgetTG() {
	b.mu.Lock()
	b.tgARN = ""
	b.mu.Unlock()
}

// Get implements lb.LoadBalancer.
func (b *loadBalancer) Get(ctx context.Context) (lb.Status, error) {
	b.mu.Lock()
	if b.cached != nil && time.Since(b.cachedAt) < b.p.poll {
		st := *b.cached
		b.mu.Unlock()
		return st, nil
	}
	b.mu.Unlock()
	st, err := b.get(ctx)
	if err == nil {
		b.mu.Lock()
		b.cached, b.cachedAt = &st, time.Now()
		b.mu.Unlock()
	}
	return st, err
}

func (b *loadBalancer) get(ctx context.Context) (lb.Status, error) {
	if _, err := b.findLB(ctx); err != nil {
		return lb.Status{}, err
	}
	ip, err := b.p.eipAddress(ctx)
	if err != nil {
		return lb.Status{}, err
	}
	st := lb.Status{IP: b.p.amap.toNet(ip)}
	if b.p.dnsEndpoint {
		if l, err := b.describeLB(ctx); err == nil {
			if a := lbAddresses(l); len(a) > 0 {
				st.IP = b.p.amap.toNet(a[0])
			}
		}
	}
	tg, err := b.findTG(ctx)
	if errors.Is(err, errkind.NotFound) {
		return st, nil
	}
	if err != nil {
		return lb.Status{}, err
	}
	hs, err := b.health(ctx, tg)
	if err != nil {
		return lb.Status{}, err
	}
	drained, err := b.drained(ctx, tg)
	if err != nil {
		return lb.Status{}, err
	}
	seen := map[string]bool{}
	for _, h := range hs {
		name, err := b.p.nameOf(ctx, aws.ToString(h.Target.Id))
		if err != nil {
			name = aws.ToString(h.Target.Id)
		}
		th := lb.TargetHealth{Name: name, Address: b.p.addressOf(aws.ToString(h.Target.Id))}
		if h.TargetHealth != nil {
			switch h.TargetHealth.State {
			case elbtypes.TargetHealthStateEnumHealthy:
				th.Healthy = true
			case elbtypes.TargetHealthStateEnumDraining:
				th.Draining = true
			case elbtypes.TargetHealthStateEnumUnused:
				if h.TargetHealth.Reason == elbtypes.TargetHealthReasonEnumNotRegistered {
					continue // not registered
				}
				// Target.NotInUse: registered in a zone the NLB does not
				// cover (or no listener forwards to the group): reported
				// unhealthy with that reason, not hidden.
			}
			if r := string(h.TargetHealth.Reason); r != "" {
				th.Reason = strings.TrimSpace(r + " " + aws.ToString(h.TargetHealth.Description))
			}
		}
		if drained[name] {
			th.Draining, th.Healthy = true, false
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		st.Targets = append(st.Targets, th)
	}
	for name := range drained {
		if !seen[name] {
			st.Targets = append(st.Targets, lb.TargetHealth{Name: name, Draining: true, Reason: "deregistered: connections draining"})
		}
	}
	sort.Slice(st.Targets, func(i, j int) bool { return st.Targets[i].Name < st.Targets[j].Name })
	return st, nil
}

func (b *loadBalancer) health(ctx context.Context, tg string) ([]elbtypes.TargetHealthDescription, error) {
	out, err := b.p.elb.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tg)})
	if code(err) == "TargetGroupNotFound" {
		b.forgetTG()
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err, "describe target health of %s", b.tgName())
	}
	return out.TargetHealthDescriptions, nil
}

func (b *loadBalancer) drained(ctx context.Context, tg string) (map[string]bool, error) {
	out, err := b.p.elb.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{tg}})
	if code(err) == "TargetGroupNotFound" {
		b.forgetTG()
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err, "describe tags of %s", b.tgName())
	}
	m := map[string]bool{}
	for _, d := range out.TagDescriptions {
		for _, t := range d.Tags {
			if n, ok := strings.CutPrefix(aws.ToString(t.Key), tagDrainedPrefix); ok {
				m[n] = true
			}
		}
	}
	return m, nil
}

// eipAddress is the Elastic IP's public address (cached: it never changes
// for an allocation).
func (p *Provider) eipAddress(ctx context.Context) (string, error) {
	if v, ok := p.eipIP.Load().(string); ok && v != "" {
		return v, nil
	}
	e, err := p.sip.describe(ctx)
	if err != nil {
		return "", err
	}
	p.eipIP.Store(e.publicIP)
	return e.publicIP, nil
}

func (p *Provider) addressOf(id string) string {
	if v, ok := p.addrs.Load(id); ok {
		return v.(string)
	}
	return ""
}

// Create implements lb.LoadBalancer.
func (b *loadBalancer) Create(ctx context.Context, ip string, targets []lb.Target) error {
	defer b.invalidate()
	e, err := b.p.sip.describe(ctx)
	if err != nil {
		return err
	}
	if b.p.amap.toNet(e.publicIP) != ip {
		return errkind.Errorf(errkind.InvalidArgument, "load balancer IP %s is not the cluster's Elastic IP %s", ip, b.p.amap.toNet(e.publicIP))
	}
	allocation := e.allocationID
	switch {
	case b.p.dnsEndpoint:
		allocation = "" // master 0 keeps the Elastic IP; the Route53 name moves
	case e.instanceID != "":
		return errkind.Errorf(errkind.FailedPrecondition, "Elastic IP %s is still attached to instance %s; detach it first", ip, e.instanceID)
	}
	first, err := b.firstTarget(ctx, targets)
	if err != nil {
		return err
	}
	tg, err := b.ensureTG(ctx, first.vpc)
	if err != nil {
		return err
	}
	arn, err := b.findLB(ctx)
	if errors.Is(err, errkind.NotFound) {
		arn, err = b.createLB(ctx, first.subnet, allocation)
	}
	if err != nil {
		return err
	}
	w := elb.NewLoadBalancerAvailableWaiter(b.p.elb, func(o *elb.LoadBalancerAvailableWaiterOptions) { o.MinDelay, o.MaxDelay = b.p.poll, b.p.maxDelay() })
	if err := w.Wait(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerArns: []string{arn}}, b.p.waitMax(ctx)); err != nil {
		return mapErr(err, "wait until load balancer %s is active", b.lbName())
	}
	ls, err := b.p.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: aws.String(arn)})
	if err != nil {
		return mapErr(err, "describe listeners of %s", b.lbName())
	}
	has := false
	for _, l := range ls.Listeners {
		has = has || int(aws.ToInt32(l.Port)) == b.p.apiPort
	}
	if !has {
		_, err := b.p.elb.CreateListener(ctx, &elb.CreateListenerInput{
			LoadBalancerArn: aws.String(arn),
			Protocol:        elbtypes.ProtocolEnumTcp,
			Port:            aws.Int32(int32(b.p.apiPort)),
			DefaultActions:  []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: aws.String(tg)}},
			Tags:            b.tags(),
		})
		if err != nil && code(err) != "DuplicateListener" {
			return mapErr(err, "create TCP listener :%d on %s", b.p.apiPort, b.lbName())
		}
	}
	for _, t := range targets {
		if err := b.register(ctx, tg, t.Name); err != nil {
			return err
		}
	}
	return nil
}

func (b *loadBalancer) tags() []elbtypes.Tag {
	return []elbtypes.Tag{{Key: aws.String(TagCluster), Value: aws.String(b.p.cluster)}}
}

func (b *loadBalancer) ensureTG(ctx context.Context, vpc string) (string, error) {
	tg, err := b.findTG(ctx)
	if !errors.Is(err, errkind.NotFound) {
		return tg, err
	}
	port := strconv.Itoa(b.p.apiPort)
	out, err := b.p.elb.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{
		Name:                       aws.String(b.tgName()),
		Protocol:                   elbtypes.ProtocolEnumTcp,
		Port:                       aws.Int32(int32(b.p.apiPort)),
		VpcId:                      aws.String(vpc),
		TargetType:                 elbtypes.TargetTypeEnumInstance,
		HealthCheckEnabled:         aws.Bool(true),
		HealthCheckProtocol:        elbtypes.ProtocolEnumHttps,
		HealthCheckPath:            aws.String(healthCheckPath),
		HealthCheckPort:            aws.String(port),
		HealthCheckIntervalSeconds: aws.Int32(10),
		HealthyThresholdCount:      aws.Int32(2),
		UnhealthyThresholdCount:    aws.Int32(2),
		Tags:                       b.tags(),
	})
	if code(err) == "DuplicateTargetGroupName" {
		return b.findTG(ctx)
	}
	if err != nil {
		return "", mapErr(err, "create target group %s", b.tgName())
	}
	tg = aws.ToString(out.TargetGroups[0].TargetGroupArn)
	if err := b.ensureTGAttributes(ctx, tg); err != nil {
		return "", err
	}
	b.mu.Lock()
	b.tgARN = tg
	b.mu.Unlock()
	return tg, nil
}

// tgAttributes are the target group's draining settings: the
// deregistration delay (--aws-deregistration-delay), and connection
// termination at its end, so that a drained apiserver's long watches are
// closed by the NLB (clients re-dial through it to a live target) rather
// than cut when the instance goes.
func (b *loadBalancer) tgAttributes() map[string]string {
	return map[string]string{
		"deregistration_delay.timeout_seconds":                strconv.Itoa(b.p.deregDelay),
		"deregistration_delay.connection_termination.enabled": "true",
	}
}

// ensureTGAttributes sets the draining attributes that differ (observe →
// compare → act: a re-run, or a target group made with other settings,
// converges).
func (b *loadBalancer) ensureTGAttributes(ctx context.Context, tg string) error {
	cur, err := b.p.elb.DescribeTargetGroupAttributes(ctx, &elb.DescribeTargetGroupAttributesInput{TargetGroupArn: aws.String(tg)})
	if err != nil {
		return mapErr(err, "describe the attributes of %s", b.tgName())
	}
	have := map[string]string{}
	for _, a := range cur.Attributes {
		have[aws.ToString(a.Key)] = aws.ToString(a.Value)
	}
	var set []elbtypes.TargetGroupAttribute
	want := b.tgAttributes()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if have[k] != want[k] {
			set = append(set, elbtypes.TargetGroupAttribute{Key: aws.String(k), Value: aws.String(want[k])})
		}
	}
	if len(set) == 0 {
		return nil
	}
	if _, err := b.p.elb.ModifyTargetGroupAttributes(ctx, &elb.ModifyTargetGroupAttributesInput{TargetGroupArn: aws.String(tg), Attributes: set}); err != nil {
		return mapErr(err, "set the deregistration delay (%ds) and connection termination of %s", b.p.deregDelay, b.tgName())
	}
	return nil
}

// firstTarget is the instance of the first of targets: its subnet places
// the load balancer, its VPC the target group.
func (b *loadBalancer) firstTarget(ctx context.Context, targets []lb.Target) (instance, error) {
	if len(targets) == 0 {
		return instance{}, errkind.Errorf(errkind.InvalidArgument, "load balancer: at least one target is needed (its subnet places the load balancer)")
	}
	is, err := b.p.inst.describe(ctx, targets[0].Name)
	if err != nil {
		return instance{}, err
	}
	if len(is) == 0 {
		return instance{}, errkind.Errorf(errkind.NotFound, "target %s: no such replica", targets[0].Name)
	}
	return is[0], nil
}

// Prepare implements lb.Preparer: before the Elastic IP leaves master 0,
// check that the masters' security groups let the NLB's health checks and
// the clients in (the error names the missing rule), and build the target
// group, so that a promotion that cannot succeed fails before anything
// changes.
func (b *loadBalancer) Prepare(ctx context.Context, targets []lb.Target) error {
	defer b.invalidate()
	first, err := b.firstTarget(ctx, targets)
	if err != nil {
		return err
	}
	if err := b.p.checkSecurityGroups(ctx, first); err != nil {
		return err
	}
	tg, err := b.ensureTG(ctx, first.vpc)
	if err != nil {
		return err
	}
	return b.ensureTGAttributes(ctx, tg)
}

// createLB creates the NLB with the Elastic IP in the subnet mapping of
// the first target's subnet, and turns cross-zone load balancing on (the
// Elastic IP lives in one zone; replicas may live in others).
func (b *loadBalancer) createLB(ctx context.Context, subnet, allocationID string) (string, error) {
	mapping := elbtypes.SubnetMapping{SubnetId: aws.String(subnet)}
	if allocationID != "" { // "": the DNS endpoint, AWS assigns the address
		mapping.AllocationId = aws.String(allocationID)
	}
	out, err := b.p.elb.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{
		Name:           aws.String(b.lbName()),
		Type:           elbtypes.LoadBalancerTypeEnumNetwork,
		Scheme:         elbtypes.LoadBalancerSchemeEnumInternetFacing,
		IpAddressType:  elbtypes.IpAddressTypeIpv4,
		SubnetMappings: []elbtypes.SubnetMapping{mapping},
		Tags:           b.tags(),
	})
	if code(err) == "DuplicateLoadBalancerName" {
		return b.findLB(ctx)
	}
	if err != nil {
		return "", mapErr(err, "create network load balancer %s", b.lbName())
	}
	arn := aws.ToString(out.LoadBalancers[0].LoadBalancerArn)
	_, err = b.p.elb.ModifyLoadBalancerAttributes(ctx, &elb.ModifyLoadBalancerAttributesInput{
		LoadBalancerArn: aws.String(arn),
		Attributes:      []elbtypes.LoadBalancerAttribute{{Key: aws.String("load_balancing.cross_zone.enabled"), Value: aws.String("true")}},
	})
	if err != nil {
		return "", mapErr(err, "enable cross-zone load balancing on %s", b.lbName())
	}
	return arn, nil
}

// targetIDs are the instance IDs that stand for replica name: its live
// instance and any registered target carrying its name.
func (b *loadBalancer) targetIDs(ctx context.Context, tg, name string) ([]string, error) {
	is, err := b.p.inst.describe(ctx, name)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, i := range is {
		ids[i.id] = true
	}
	hs, err := b.health(ctx, tg)
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		id := aws.ToString(h.Target.Id)
		if n, err := b.p.nameOf(ctx, id); err == nil && n == name {
			ids[id] = true
		}
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

func (b *loadBalancer) register(ctx context.Context, tg, name string) error {
	is, err := b.p.inst.describe(ctx, name)
	if err != nil {
		return err
	}
	if len(is) == 0 {
		return errkind.Errorf(errkind.NotFound, "target %s: no such replica", name)
	}
	if err := b.p.checkSecurityGroups(ctx, is[0]); err != nil {
		return err
	}
	if err := b.ensureZone(ctx, is[0].zone, is[0].subnet); err != nil {
		return err
	}
	if _, err := b.p.elb.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(tg), Targets: []elbtypes.TargetDescription{{Id: aws.String(is[0].id)}}}); err != nil {
		return mapErr(err, "register %s (%s) with %s", name, is[0].id, b.tgName())
	}
	if _, err := b.p.elb.RemoveTags(ctx, &elb.RemoveTagsInput{ResourceArns: []string{tg}, TagKeys: []string{tagDrainedPrefix + name}}); err != nil {
		return mapErr(err, "untag drained target %s", name)
	}
	return nil
}

// ensureZone enables the NLB in zone (through subnet) when a target lives
// there: an NLB only routes to targets in zones it is enabled in (others
// report Target.NotInUse). The zone is added with SetSubnets, keeping every
// existing mapping as it is — the Elastic IP stays on the mapping of its
// own zone, and the new zone's node gets an AWS-assigned address (one
// Elastic IP per zone at most; clients keep using the cluster's one, and
// cross-zone load balancing spreads its traffic over every zone).
func (b *loadBalancer) ensureZone(ctx context.Context, zone, subnet string) error {
	out, err := b.p.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{b.lbName()}})
	if err != nil || len(out.LoadBalancers) == 0 {
		return mapErr(err, "describe load balancer %s", b.lbName())
	}
	l := out.LoadBalancers[0]
	var mappings []elbtypes.SubnetMapping
	for _, az := range l.AvailabilityZones {
		if aws.ToString(az.ZoneName) == zone || aws.ToString(az.SubnetId) == subnet {
			return nil
		}
		m := elbtypes.SubnetMapping{SubnetId: az.SubnetId}
		for _, a := range az.LoadBalancerAddresses {
			if a.AllocationId != nil {
				m.AllocationId = a.AllocationId
			}
		}
		mappings = append(mappings, m)
	}
	if zone == "" || subnet == "" || len(mappings) == 0 {
		return nil // nothing known to compare: leave the LB as it is
	}
	mappings = append(mappings, elbtypes.SubnetMapping{SubnetId: aws.String(subnet)})
	if _, err := b.p.elb.SetSubnets(ctx, &elb.SetSubnetsInput{LoadBalancerArn: l.LoadBalancerArn, SubnetMappings: mappings}); err != nil {
		return mapErr(err, "enable %s in zone %s (subnet %s)", b.lbName(), zone, subnet)
	}
	return nil
}

// AddTarget implements lb.LoadBalancer.
func (b *loadBalancer) AddTarget(ctx context.Context, t lb.Target) error {
	defer b.invalidate()
	tg, err := b.findTG(ctx)
	if err != nil {
		return err
	}
	return b.register(ctx, tg, t.Name)
}

// deregister deregisters the replica's targets from the target group
// and returns the group and the targets' IDs; no group (tg "") or a
// target not registered (InvalidTarget) is success.
func (b *loadBalancer) deregister(ctx context.Context, name string) (tg string, ids []string, err error) {
	tg, err = b.findTG(ctx)
	if errors.Is(err, errkind.NotFound) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	ids, err = b.targetIDs(ctx, tg, name)
	if err != nil || len(ids) == 0 {
		return tg, nil, err
	}
	if _, err := b.p.elb.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: aws.String(tg), Targets: targetDescriptions(ids)}); err != nil && code(err) != "InvalidTarget" {
		return tg, nil, mapErr(err, "deregister %s from %s", name, b.tgName())
	}
	return tg, ids, nil
}

func targetDescriptions(ids []string) []elbtypes.TargetDescription {
	ts := make([]elbtypes.TargetDescription, 0, len(ids))
	for _, id := range ids {
		ts = append(ts, elbtypes.TargetDescription{Id: aws.String(id)})
	}
	return ts
}

// DrainTarget implements lb.LoadBalancer: deregister, mark it drained, and
// wait while ELBv2 drains it: new connections stop at once, open ones
// (watches) go on for the deregistration delay and are then closed
// (connection termination). The workflows' drain grace starts after that.
func (b *loadBalancer) DrainTarget(ctx context.Context, name string) error {
	defer b.invalidate()
	tg, ids, err := b.deregister(ctx, name)
	if err != nil || len(ids) == 0 {
		return err
	}
	if _, err := b.p.elb.AddTags(ctx, &elb.AddTagsInput{ResourceArns: []string{tg}, Tags: []elbtypes.Tag{{Key: aws.String(tagDrainedPrefix + name), Value: aws.String(time.Now().UTC().Format(time.RFC3339))}}}); err != nil {
		return mapErr(err, "mark %s drained", name)
	}
	return b.waitDeregistered(ctx, tg, name, ids)
}

// waitDeregistered waits until ELBv2 has drained the targets (no longer
// "draining": the deregistration delay is over).
func (b *loadBalancer) waitDeregistered(ctx context.Context, tg, name string, ids []string) error {
	w := elb.NewTargetDeregisteredWaiter(b.p.elb, func(o *elb.TargetDeregisteredWaiterOptions) { o.MinDelay, o.MaxDelay = b.p.poll, b.p.maxDelay() })
	if err := w.Wait(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tg), Targets: targetDescriptions(ids)}, b.p.waitMax(ctx)); err != nil {
		return mapErr(err, "wait until %s is drained from %s (deregistration delay %ds)", name, b.tgName(), b.p.deregDelay)
	}
	return nil
}

// RemoveTarget implements lb.LoadBalancer: deregister and wait until
// ELBv2 no longer lists the target.
func (b *loadBalancer) RemoveTarget(ctx context.Context, name string) error {
	defer b.invalidate()
	tg, ids, err := b.deregister(ctx, name)
	if err != nil || tg == "" {
		return err
	}
	if _, err := b.p.elb.RemoveTags(ctx, &elb.RemoveTagsInput{ResourceArns: []string{tg}, TagKeys: []string{tagDrainedPrefix + name}}); err != nil && code(err) != "TargetGroupNotFound" {
		return mapErr(err, "untag drained target %s", name)
	}
	if len(ids) == 0 {
		return nil
	}
	return b.waitDeregistered(ctx, tg, name, ids)
}

// Delete implements lb.LoadBalancer: listeners, the load balancer (waiting
// until it is gone, which frees the Elastic IP), then the target group.
func (b *loadBalancer) Delete(ctx context.Context) error {
	defer b.invalidate()
	arn, err := b.findLB(ctx)
	switch {
	case errors.Is(err, errkind.NotFound):
	case err != nil:
		return err
	default:
		ls, err := b.p.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: aws.String(arn)})
		if err != nil && code(err) != "LoadBalancerNotFound" {
			return mapErr(err, "describe listeners of %s", b.lbName())
		}
		if ls != nil {
			for _, l := range ls.Listeners {
				if _, err := b.p.elb.DeleteListener(ctx, &elb.DeleteListenerInput{ListenerArn: l.ListenerArn}); err != nil && code(err) != "ListenerNotFound" {
					return mapErr(err, "delete listener of %s", b.lbName())
				}
			}
		}
		if _, err := b.p.elb.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(arn)}); err != nil && code(err) != "LoadBalancerNotFound" {
			return mapErr(err, "delete load balancer %s", b.lbName())
		}
		w := elb.NewLoadBalancersDeletedWaiter(b.p.elb, func(o *elb.LoadBalancersDeletedWaiterOptions) { o.MinDelay, o.MaxDelay = b.p.poll, b.p.maxDelay() })
		if err := w.Wait(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerArns: []string{arn}}, b.p.waitMax(ctx)); err != nil {
			return mapErr(err, "wait until load balancer %s is deleted", b.lbName())
		}
	}
	b.forgetTG()
	tg, err := b.findTG(ctx)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// A target group stays in use for a moment after its load balancer is
	// gone (ResourceInUse): try again until it goes.
	err = b.p.pollUntil(ctx, "target group "+b.tgName()+" to be deletable", func() (bool, error) {
		_, err := b.p.elb.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: aws.String(tg)})
		switch code(err) {
		case "":
			return true, nil
		case "TargetGroupNotFound":
			return true, nil
		case "ResourceInUse":
			return false, nil
		}
		return false, mapErr(err, "delete target group %s", b.tgName())
	})
	b.forgetTG()
	if err != nil {
		return fmt.Errorf("delete load balancer: %w", err)
	}
	return nil
}

// LoadBalancerName is the name of a cluster's NLB (and, with "-api", of
// its target group).
func LoadBalancerName(cluster string) string {
	return (&Provider{cluster: cluster}).resourceName("")
}

// PromotionNote implements lb.PromotionNoter: the Elastic IP handover's
// outage. From DisassociateAddress until the NLB serves, the Elastic IP
// answers nowhere: the NLB is "provisioning" for minutes (AWS documents "a
// few minutes") and master 0 is "initial" until it passes the healthy
// threshold's checks (2 at 10 s). docs/aws.md has the outage as
// TestFirstAddOutage measures it.
func (b *loadBalancer) PromotionNote() string {
	if b.p.dnsEndpoint {
		return "none with the DNS endpoint (--aws-endpoint-mode dns): master 0 keeps the Elastic IP while the NLB provisions and passes its health checks; the Route53 name becomes an alias to the NLB only in the update-dns step, once it serves"
	}
	return "the Elastic IP handover leaves the Elastic IP answering nowhere from its detach until the new NLB is active (provisioning takes a few minutes on AWS) and master 0 has passed 2 health checks at 10 s: about 3-4 minutes for every client of the Elastic IP"
}

// describeLB is the NLB as ELBv2 reports it, or errkind.NotFound.
func (b *loadBalancer) describeLB(ctx context.Context) (elbtypes.LoadBalancer, error) {
	out, err := b.p.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{b.lbName()}})
	if code(err) == "LoadBalancerNotFound" || err == nil && len(out.LoadBalancers) == 0 {
		return elbtypes.LoadBalancer{}, errkind.Errorf(errkind.NotFound, "cluster %s has no load balancer (%s)", b.p.cluster, b.lbName())
	}
	if err != nil {
		return elbtypes.LoadBalancer{}, mapErr(err, "describe load balancer %s", b.lbName())
	}
	return out.LoadBalancers[0], nil
}

// lbAddresses are the NLB's public addresses, zone by zone.
func lbAddresses(l elbtypes.LoadBalancer) []string {
	var out []string
	for _, az := range l.AvailabilityZones {
		for _, a := range az.LoadBalancerAddresses {
			if ip := aws.ToString(a.IpAddress); ip != "" {
				out = append(out, ip)
			}
		}
	}
	return out
}

// Release implements lb.Releaser, called by demotion before the static IP
// goes to the last master. With the Elastic IP handover the NLB holds the
// Elastic IP until it is deleted (an NLB's mappings cannot change), so
// Release deletes it. With the DNS endpoint the NLB never had it: Release
// moves every Route53 name aliasing the NLB back to the Elastic IP (and
// waits until Route53 is in sync) before the NLB goes.
func (b *loadBalancer) Release(ctx context.Context) error {
	if !b.p.dnsEndpoint {
		return b.Delete(ctx)
	}
	l, err := b.describeLB(ctx)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return b.p.unaliasNLB(ctx, aws.ToString(l.DNSName))
}

// OwnAddress implements lb.OwnAddress: with the DNS endpoint the NLB
// serves on the addresses AWS assigns it and the Route53 name finds it;
// master 0 keeps the Elastic IP.
func (b *loadBalancer) OwnAddress() bool { return b.p.dnsEndpoint }
