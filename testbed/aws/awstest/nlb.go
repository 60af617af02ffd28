package awstest

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AWS's timings that the proxy plays (Elastic Load Balancing user guide,
// "Network Load Balancers" and "Target groups for your Network Load
// Balancers"). Health-check interval, thresholds and deregistration delay
// are the target group's own settings; only provisioning is fixed here.
const (
	// AWSProvisioning is how long a new NLB stays "provisioning" before
	// "active": AWS documents "a few minutes"; three is what an operator
	// usually waits.
	AWSProvisioning = 3 * time.Minute
	// AWSDeregistrationDelay is the target group default (300 s) when the
	// provider sets none.
	AWSDeregistrationDelay = 300 * time.Second
	// AWSHealthInterval and AWSHealthyThreshold are the target group
	// defaults of a TCP/HTTPS NLB target group when the provider sets none.
	AWSHealthInterval   = 30 * time.Second
	AWSHealthyThreshold = 5
)

// Timing is the one knob that speeds the NLB model up for tests: every AWS
// duration (provisioning, health-check interval, deregistration delay) is
// multiplied by Scale. No state is ever skipped: a scaled NLB still goes
// provisioning → active, a target initial → healthy after the healthy
// threshold's passing checks at the (scaled) interval, and draining for
// the (scaled) deregistration delay.
type Timing struct {
	// Scale multiplies AWS's durations; 1 is AWS's own timing. Zero means 1.
	Scale float64
}

// D scales an AWS duration.
func (t Timing) D(d time.Duration) time.Duration {
	if t.Scale <= 0 {
		return d
	}
	return time.Duration(float64(d) * t.Scale)
}

// nlbModel is the proxy's view of one load balancer: what moto 5.2.1 does
// not keep or does not time (it ignores a subnet mapping's AllocationId,
// makes an NLB active at once).
type nlbModel struct {
	arn, name string
	activeAt  time.Time
	// mappings: subnet → allocation ID ("" for an AWS-assigned address).
	mappings map[string]string
	// zones: zone → subnet (from moto's answer, which knows the subnets).
	zones map[string]string
	// targetGroups forwarded to by the LB's listeners.
	targetGroups map[string]bool
}

// tgModel is the proxy's view of one target group.
type tgModel struct {
	arn, name          string
	interval           time.Duration
	healthy, unhealthy int
	path, protocol     string
	deregDelay         time.Duration
	connTermination    bool
	// registered targets (as far as the proxy saw), and draining:
	// instance ID → when its draining ends (scaled).
	registered map[string]bool
	draining   map[string]time.Time
}

// TargetGroupView is what the data plane needs of a target group.
type TargetGroupView struct {
	ARN                string
	Interval           time.Duration // scaled
	Healthy, Unhealthy int
	Path, Protocol     string
	DeregDelay         time.Duration // scaled
	ConnTermination    bool
	// Draining are the deregistered targets still draining.
	Draining []string
}

// LBView is the proxy's model of a load balancer, for the data plane.
type LBView struct {
	ARN, Name string
	Active    bool
	// Allocations are the Elastic IP allocation IDs in its subnet mappings.
	Allocations []string
	// Zones are the availability zones the LB is enabled in.
	Zones []string
	// Addresses are the addresses AWS assigned (mappings without an
	// Elastic IP), zone by zone.
	Addresses    []string
	TargetGroups []TargetGroupView
}

var (
	lbArnRE  = regexp.MustCompile(`<LoadBalancerArn>([^<]+)</LoadBalancerArn>`)
	tgArnRE  = regexp.MustCompile(`<TargetGroupArn>([^<]+)</TargetGroupArn>`)
	azRE     = regexp.MustCompile(`(?s)<AvailabilityZones>.*?</AvailabilityZones>\s*`)
	azPairRE = regexp.MustCompile(`<ZoneName>([^<]+)</ZoneName><SubnetId>([^<]+)</SubnetId>`)
	stateRE  = regexp.MustCompile(`(?s)<State>\s*<Code>[a-z_]+</Code>\s*</State>`)
)

// learn updates the model from a successful call (its parameters and
// moto's answer). Called with p.mu held.
func (p *Proxy) learn(action string, params url.Values, body string) {
	now := time.Now()
	switch action {
	case "CreateLoadBalancer":
		if params.Get("Type") != "network" {
			return
		}
		m := lbArnRE.FindStringSubmatch(body)
		if m == nil {
			return
		}
		if old, ok := p.lbs[m[1]]; ok {
			_ = old // a repeated create answers the existing LB: keep its clock
			return
		}
		l := &nlbModel{arn: m[1], name: params.Get("Name"), activeAt: now.Add(p.timing.D(AWSProvisioning)), targetGroups: map[string]bool{}}
		l.mappings, l.zones = subnetMappings(params), zonesOf(body)
		p.lbs[l.arn] = l
	case "SetSubnets":
		if l, ok := p.lbs[params.Get("LoadBalancerArn")]; ok {
			l.mappings, l.zones = subnetMappings(params), zonesOf(body)
		}
	case "DeleteLoadBalancer":
		delete(p.lbs, params.Get("LoadBalancerArn"))
	case "CreateListener":
		if l, ok := p.lbs[params.Get("LoadBalancerArn")]; ok {
			for k, v := range params {
				if strings.HasPrefix(k, "DefaultActions.member.") && strings.HasSuffix(k, ".TargetGroupArn") && len(v) == 1 {
					l.targetGroups[v[0]] = true
				}
			}
		}
	case "CreateTargetGroup":
		m := tgArnRE.FindStringSubmatch(body)
		if m == nil {
			return
		}
		if _, ok := p.tgs[m[1]]; ok {
			return
		}
		tg := &tgModel{arn: m[1], name: params.Get("Name"), interval: AWSHealthInterval, healthy: AWSHealthyThreshold, unhealthy: 2,
			path: params.Get("HealthCheckPath"), protocol: params.Get("HealthCheckProtocol"), deregDelay: AWSDeregistrationDelay, registered: map[string]bool{}, draining: map[string]time.Time{}}
		if s, err := strconv.Atoi(params.Get("HealthCheckIntervalSeconds")); err == nil {
			tg.interval = time.Duration(s) * time.Second
		}
		if n, err := strconv.Atoi(params.Get("HealthyThresholdCount")); err == nil {
			tg.healthy = n
		}
		if n, err := strconv.Atoi(params.Get("UnhealthyThresholdCount")); err == nil {
			tg.unhealthy = n
		}
		p.tgs[tg.arn] = tg
	case "ModifyTargetGroupAttributes":
		tg, ok := p.tgs[params.Get("TargetGroupArn")]
		if !ok {
			return
		}
		for i := 1; ; i++ {
			k := params.Get(fmt.Sprintf("Attributes.member.%d.Key", i))
			if k == "" {
				break
			}
			v := params.Get(fmt.Sprintf("Attributes.member.%d.Value", i))
			switch k {
			case "deregistration_delay.timeout_seconds":
				if s, err := strconv.Atoi(v); err == nil {
					tg.deregDelay = time.Duration(s) * time.Second
				}
			case "deregistration_delay.connection_termination.enabled":
				tg.connTermination = v == "true"
			}
		}
	case "DeleteTargetGroup":
		delete(p.tgs, params.Get("TargetGroupArn"))
	case "RegisterTargets":
		if tg, ok := p.tgs[params.Get("TargetGroupArn")]; ok {
			for _, id := range targetIDs(params) {
				delete(tg.draining, id)
				tg.registered[id] = true
			}
		}
	case "DeregisterTargets":
		if tg, ok := p.tgs[params.Get("TargetGroupArn")]; ok {
			for _, id := range targetIDs(params) {
				if tg.registered[id] { // deregistering what is not registered drains nothing
					delete(tg.registered, id)
					tg.draining[id] = now.Add(p.timing.D(tg.deregDelay))
				}
			}
		}
	}
}

func subnetMappings(params url.Values) map[string]string {
	m := map[string]string{}
	for i := 1; ; i++ {
		s := params.Get(fmt.Sprintf("SubnetMappings.member.%d.SubnetId", i))
		if s == "" {
			break
		}
		m[s] = params.Get(fmt.Sprintf("SubnetMappings.member.%d.AllocationId", i))
	}
	for i := 1; ; i++ {
		s := params.Get(fmt.Sprintf("Subnets.member.%d", i))
		if s == "" {
			break
		}
		m[s] = ""
	}
	return m
}

func zonesOf(body string) map[string]string {
	z := map[string]string{}
	for _, m := range azPairRE.FindAllStringSubmatch(body, -1) {
		z[m[1]] = m[2]
	}
	return z
}

func targetIDs(params url.Values) []string {
	var ids []string
	for i := 1; ; i++ {
		id := params.Get(fmt.Sprintf("Targets.member.%d.Id", i))
		if id == "" {
			return ids
		}
		ids = append(ids, id)
	}
}

// rewriteLBs puts the model's state and subnet mappings into a
// DescribeLoadBalancers answer. Called with p.mu held.
func (p *Proxy) rewriteLBs(s string) string {
	idx := lbArnRE.FindAllStringSubmatchIndex(s, -1)
	if len(idx) == 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:idx[0][0]])
	for k, m := range idx {
		end := len(s)
		if k+1 < len(idx) {
			end = idx[k+1][0]
		}
		seg := s[m[0]:end]
		if l, ok := p.lbs[s[m[2]:m[3]]]; ok {
			code := "active"
			if time.Now().Before(l.activeAt) {
				code = "provisioning"
				p.served["provisioning"]++
			}
			seg = stateRE.ReplaceAllLiteralString(seg, "<State><Code>"+code+"</Code></State>")
			seg = azRE.ReplaceAllLiteralString(seg, l.renderZones(p.assignedNet))
		}
		b.WriteString(seg)
	}
	return b.String()
}

// AssignedNet is where the proxy's NLBs get the public addresses AWS
// assigns to a subnet mapping without an Elastic IP: 198.51.100.<10+k>
// for the k-th zone (TEST-NET-2), unless SetAssignedNet put them in the
// namespace VPC's external range.
const AssignedNet = "198.51.100."

func (l *nlbModel) sortedZones() []string {
	zs := make([]string, 0, len(l.zones))
	for z := range l.zones {
		zs = append(zs, z)
	}
	sort.Strings(zs)
	return zs
}

// assigned is the address AWS assigned in zone z (no Elastic IP there),
// from net (AssignedNet unless the proxy was given another).
func (l *nlbModel) assigned(z, net string) string {
	if net == "" {
		net = AssignedNet
	}
	for k, zz := range l.sortedZones() {
		if zz == z && l.mappings[l.zones[z]] == "" {
			return net + strconv.Itoa(10+k)
		}
	}
	return ""
}

func (l *nlbModel) renderZones(net string) string {
	var b strings.Builder
	b.WriteString("<AvailabilityZones>")
	for _, z := range l.sortedZones() {
		sn := l.zones[z]
		b.WriteString("<member><ZoneName>" + z + "</ZoneName><SubnetId>" + sn + "</SubnetId>")
		if a := l.mappings[sn]; a != "" {
			b.WriteString("<LoadBalancerAddresses><member><AllocationId>" + a + "</AllocationId></member></LoadBalancerAddresses>")
		} else if ip := l.assigned(z, net); ip != "" {
			b.WriteString("<LoadBalancerAddresses><member><IpAddress>" + ip + "</IpAddress></member></LoadBalancerAddresses>")
		}
		b.WriteString("</member>")
	}
	b.WriteString("</AvailabilityZones>")
	return b.String()
}

// lbOfTG is the model LB whose listener forwards to tg. Called with p.mu
// held.
func (p *Proxy) lbOfTG(tg string) *nlbModel {
	for _, l := range p.lbs {
		if l.targetGroups[tg] {
			return l
		}
	}
	return nil
}

// targetHealth is the state the proxy reports for a target moto lists as
// registered. Called with p.mu held.
func (p *Proxy) targetHealth(tg, id string) (state, reason, desc string) {
	l := p.lbOfTG(tg)
	switch {
	case l == nil:
		return "unused", "Target.NotInUse", "Target group is not configured to receive traffic from the load balancer"
	case time.Now().Before(l.activeAt):
		return "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
	}
	zone := ""
	if p.zoneOf != nil {
		zone = p.zoneOf(id)
	}
	if zone == "" {
		return "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
	}
	if _, ok := l.zones[zone]; !ok {
		return "unused", "Target.NotInUse", "Target is in an Availability Zone that is not enabled for the load balancer"
	}
	if p.health == nil {
		return "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
	}
	return p.health(id)
}

// LoadBalancer returns the proxy's model of the NLB named name.
func (p *Proxy) LoadBalancer(name string) (LBView, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, l := range p.lbs {
		if l.name != name {
			continue
		}
		v := LBView{ARN: l.arn, Name: l.name, Active: !now.Before(l.activeAt)}
		for _, a := range l.mappings {
			if a != "" {
				v.Allocations = append(v.Allocations, a)
			}
		}
		for _, z := range l.sortedZones() {
			v.Zones = append(v.Zones, z)
			if ip := l.assigned(z, p.assignedNet); ip != "" {
				v.Addresses = append(v.Addresses, ip)
			}
		}
		sort.Strings(v.Allocations)
		sort.Strings(v.Zones)
		for arn := range l.targetGroups {
			tg, ok := p.tgs[arn]
			if !ok {
				continue
			}
			tv := TargetGroupView{ARN: arn, Interval: p.timing.D(tg.interval), Healthy: tg.healthy, Unhealthy: tg.unhealthy,
				Path: tg.path, Protocol: tg.protocol, DeregDelay: p.timing.D(tg.deregDelay), ConnTermination: tg.connTermination}
			for id, until := range tg.draining {
				if now.Before(until) {
					tv.Draining = append(tv.Draining, id)
				}
			}
			sort.Strings(tv.Draining)
			v.TargetGroups = append(v.TargetGroups, tv)
		}
		return v, true
	}
	return LBView{}, false
}
