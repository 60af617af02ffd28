package aws_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// env is one moto cluster plus what the workflows need.
type env struct {
	t  *testing.T
	c  *awstest.Cluster
	wf *workflowstest.Runner
	// dns: the cluster runs with --aws-endpoint-mode dns (master 0 keeps
	// the Elastic IP; the name aliases the NLB while there is one).
	dns bool
}

const dnsKind = "route53"

// stepTimeout bounds each of a workflow's waits in these tests: a hang
// guard (a replica is healthy in seconds on a quiet machine; one minute
// ran out at load 24), not a speed.
const stepTimeout = 5 * time.Minute

func (e *env) dnsName() string { return "api." + e.c.Name + ".example.test." }

// envOn is the env of c (dns: c runs in the dns endpoint mode).
func envOn(t *testing.T, c *awstest.Cluster, dns bool) *env {
	return &env{t: t, c: c, wf: workflowstest.NewRunner(c.Provider, c.Name, c.Settings.StateDir), dns: dns}
}

func (e *env) deps(after func(string) error) *workflows.Deps { return e.wf.Deps(after) }

func (e *env) add(ctx context.Context, name string, after func(string) error) error {
	return e.addIn(ctx, name, "", after)
}

func (e *env) addIn(ctx context.Context, name, zone string, after func(string) error) error {
	return e.wf.Add(ctx, workflows.AddParams{Name: name, Zone: zone, DNSKind: dnsKind, DNSName: e.dnsName(), Timeout: stepTimeout}, after)
}

func (e *env) remove(ctx context.Context, name string, after func(string) error) error {
	return e.wf.Remove(ctx, workflows.RemoveParams{Name: name, Timeout: stepTimeout}, after)
}

// newEnv brings a kube-up cluster up on the namespace VPC (in the
// endpoint mode of o, or of HAMASTER_AWS_ENDPOINT_MODE) and returns its
// env: masters in kube-up's AWS format, the operator (this process) in
// the root namespace reaching etcd and the apiservers over SSH through
// the bastion.
func newEnv(t *testing.T, name string, o awstest.KubeUpOptions) *env {
	return newKubeUpEnv(t, name, o)
}

// hostnames are the running instances' EC2 hostnames by Name tag.
func (e *env) hostnames(ctx context.Context) map[string]string {
	out, err := e.c.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			for _, tg := range i.Tags {
				if aws.ToString(tg.Key) == awsp.TagName {
					m[aws.ToString(tg.Value)] = awsp.Hostname(aws.ToString(i.PrivateIpAddress))
				}
			}
		}
	}
	return m
}

// assertConverged checks the workflows' view (replicas, members, LB
// targets, static IP holder, journal) and AWS's (nothing orphaned: live
// instances, data volumes, Elastic IP association, load balancer, target
// group, DNS record) against want, and that one node runs per replica.
func (e *env) assertConverged(ctx context.Context, want ...string) {
	t := e.t
	t.Helper()
	sort.Strings(want)
	rep := workflowstest.Settled(ctx, t, e.deps(nil))
	c := e.c
	if c.KubeUp != nil {
		// kube-up's members are etcd-<EC2 hostname>.
		hosts := e.hostnames(ctx)
		workflowstest.AssertReplicasAndMembersNamed(t, rep, want, func(r string) string { return "etcd-" + hosts[r] })
	} else {
		workflowstest.AssertReplicasAndMembers(t, rep, want)
	}
	lbs, _ := c.ELB.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	tgs, _ := c.ELB.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{})
	addrs, err := c.EC2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{c.EIPAllocation}})
	if err != nil || len(addrs.Addresses) != 1 {
		t.Fatalf("Elastic IP: %v", err)
	}
	eip := addrs.Addresses[0]
	switch {
	case len(want) == 1:
		if len(lbs.LoadBalancers) != 0 || len(tgs.TargetGroups) != 0 {
			t.Errorf("one replica but %d load balancers and %d target groups", len(lbs.LoadBalancers), len(tgs.TargetGroups))
		}
		if rep.StaticIPHolder != want[0] || aws.ToString(eip.InstanceId) == "" {
			t.Errorf("static IP held by %q (instance %q), want %s", rep.StaticIPHolder, aws.ToString(eip.InstanceId), want[0])
		}
	default:
		if len(lbs.LoadBalancers) != 1 || len(tgs.TargetGroups) != 1 {
			t.Errorf("%d replicas but %d load balancers and %d target groups", len(want), len(lbs.LoadBalancers), len(tgs.TargetGroups))
		}
		if e.dns {
			if aws.ToString(eip.InstanceId) == "" {
				t.Errorf("DNS endpoint: the Elastic IP left the masters")
			}
		} else if aws.ToString(eip.AssociationId) != "" {
			t.Errorf("Elastic IP still associated with %s while the NLB owns it", aws.ToString(eip.InstanceId))
		}
		workflowstest.AssertLBTargets(t, rep, want)
	}
	is, err := c.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + awsp.TagCluster), Values: []string{c.Name}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, r := range is.Reservations {
		for _, i := range r.Instances {
			for _, tg := range i.Tags {
				if aws.ToString(tg.Key) == awsp.TagName {
					live = append(live, aws.ToString(tg.Value))
				}
			}
		}
	}
	sort.Strings(live)
	if !slices.Equal(live, want) {
		t.Errorf("live instances %v, want %v", live, want)
	}
	vols, err := c.EC2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagRole), Values: []string{"data"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var volOf []string
	for _, v := range vols.Volumes {
		for _, tg := range v.Tags {
			if aws.ToString(tg.Key) == awsp.TagReplica {
				volOf = append(volOf, aws.ToString(tg.Value))
			}
		}
		if v.State != ec2types.VolumeStateInUse {
			t.Errorf("data volume %s is %s, not in use", aws.ToString(v.VolumeId), v.State)
		}
	}
	sort.Strings(volOf)
	if !slices.Equal(volOf, want) {
		t.Errorf("data volumes of %v, want %v", volOf, want)
	}
	if ep, _ := workflows.LoadEndpoint(c.Settings.StateDir, c.Name); ep.DNSName != "" {
		rr, err := c.R53.ListResourceRecordSets(ctx, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(c.ZoneID)})
		if err != nil {
			t.Fatal(err)
		}
		var a []string
		for _, r := range rr.ResourceRecordSets {
			if r.Type == "A" {
				for _, v := range r.ResourceRecords {
					a = append(a, aws.ToString(r.Name)+"="+aws.ToString(v.Value))
				}
				if r.AliasTarget != nil {
					a = append(a, aws.ToString(r.Name)+"=alias:"+strings.TrimSuffix(strings.ToLower(aws.ToString(r.AliasTarget.DNSName)), "."))
				}
			}
		}
		w := []string{e.dnsName() + "=" + c.EIPPublicIP}
		if e.dns && len(want) > 1 {
			w = []string{e.dnsName() + "=alias:" + strings.ToLower(aws.ToString(lbs.LoadBalancers[0].DNSName))}
		}
		if !slices.Equal(a, w) {
			t.Errorf("A records %v, want %v", a, w)
		}
	}
	// The data plane follows EC2 by polling it: a terminated instance's
	// node may take a moment to stop.
	if got := waitNodes(ctx, c, want); !slices.Equal(got, want) {
		t.Errorf("node processes %v, want %v (vms: %v)", got, want, c.VMs.LastError())
	}
	b, _ := os.ReadFile(filepath.Join(c.Settings.StateDir, c.Name, "aws", "addresses.json"))
	for _, n := range want {
		if n != c.Master && !strings.Contains(string(b), `"`+n+`"`) {
			t.Errorf("no address reservation for %s", n)
		}
	}
	if j, _ := workflows.NewJournalStore(c.Settings.StateDir, c.Name).Load(); j != nil && !j.Finished {
		t.Errorf("journal unfinished: %s at %+v", j.Workflow, j.Steps)
	}
}

// TestAddRemove1to3to1 grows the cluster 1→3 (the first add promotes the
// Elastic IP to an NLB) and shrinks it 3→1 (the last remove demotes it),
// with throttling, 5xx, an invisible new instance, PENDING DNS changes and
// targets initial/unhealthy before healthy injected, and checks what moto
// ignores from the recorded requests.
func TestAddRemove1to3to1(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "e2e", awstest.KubeUpOptions{})
	c := e.c
	// A hang guard (a quiet run takes about a minute; 4 minutes ran out
	// at load 24), not a speed: the package's -timeout is 15 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	px := c.Proxy
	px.InvisibleAfterRun(3)
	px.PendingChanges(2)
	for _, f := range []struct {
		action, kind string
		n            int
	}{
		{"DescribeInstances", awstest.FaultThrottle, 2},
		{"RunInstances", awstest.Fault5xx, 1},
		{"CreateLoadBalancer", awstest.FaultThrottle, 1},
		{"RegisterTargets", awstest.Fault5xx, 1},
		{"DescribeTargetHealth", awstest.FaultThrottle, 2},
		{"ChangeResourceRecordSets", awstest.FaultThrottle, 1},
		{"GetChange", awstest.Fault5xx, 1},
		{"DisassociateAddress", awstest.Fault5xx, 1},
	} {
		px.Inject(f.action, f.kind, f.n)
	}
	// The second replica lives in the second zone: the provider must enable
	// the NLB there (SetSubnets) or its target stays unused.
	names := []string{"e2e-master-a01", "e2e-master-b02"}
	zones := []string{awstest.Zone, awstest.ZoneB}
	for k, n := range names {
		mark := px.Mark()
		start := time.Now()
		if err := e.addIn(ctx, n, zones[k], nil); err != nil {
			t.Fatalf("add %s: %v (vms: %v)", n, err, c.VMs.LastError())
		}
		t.Logf("add %s: %s, API calls %s", n, time.Since(start).Round(time.Millisecond), awstest.FormatCounts(px.CountsSince(mark)))
	}
	e.assertConverged(ctx, c.Master, names[0], names[1])

	// What moto ignores, the proxy's NLB model answers: the Elastic IP in
	// the subnet mapping of the master's zone, both zones enabled.
	viaProxy := elb.NewFromConfig(aws.Config{Region: awstest.Region, Credentials: c.ELB.Options().Credentials, BaseEndpoint: aws.String(px.URL)})
	lbs, err := viaProxy.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{awsp.LoadBalancerName(c.Name)}})
	if err != nil || len(lbs.LoadBalancers) != 1 {
		t.Fatalf("describe the NLB through the proxy: %v", err)
	}
	l := lbs.LoadBalancers[0]
	if l.Type != "network" || l.Scheme != "internet-facing" || l.State == nil || l.State.Code != "active" {
		t.Errorf("NLB %s %s %+v, want an active internet-facing network LB", l.Type, l.Scheme, l.State)
	}
	gotZones := map[string]string{}
	for _, az := range l.AvailabilityZones {
		alloc := ""
		for _, a := range az.LoadBalancerAddresses {
			alloc = aws.ToString(a.AllocationId)
		}
		gotZones[aws.ToString(az.ZoneName)] = aws.ToString(az.SubnetId) + "/" + alloc
	}
	want := map[string]string{awstest.Zone: c.Subnet + "/" + c.EIPAllocation, awstest.ZoneB: c.SubnetB + "/"}
	if e.dns {
		want[awstest.Zone] = c.Subnet + "/" // master 0 keeps the Elastic IP
	}
	if !maps.Equal(gotZones, want) {
		t.Errorf("NLB zones %v, want %v", gotZones, want)
	}
	tgs, err := c.ELB.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{awsp.LoadBalancerName(c.Name) + "-api"}})
	if err != nil || len(tgs.TargetGroups) != 1 {
		t.Fatalf("describe the target group: %v", err)
	}
	tg := tgs.TargetGroups[0]
	port := fmt.Sprint(providers.APIServerPortOf(c.Provider)) // kube-up's masters: 443
	for k, v := range map[string][2]string{
		"Protocol":            {string(tg.Protocol), "TCP"},
		"Port":                {fmt.Sprint(aws.ToInt32(tg.Port)), port},
		"TargetType":          {string(tg.TargetType), "instance"},
		"HealthCheckProtocol": {string(tg.HealthCheckProtocol), "HTTPS"},
		"HealthCheckPath":     {aws.ToString(tg.HealthCheckPath), "/readyz"},
		"HealthCheckPort":     {aws.ToString(tg.HealthCheckPort), port},
	} {
		if v[0] != v[1] {
			t.Errorf("target group %s = %q, want %q", k, v[0], v[1])
		}
	}
	if assoc, ok := px.Last("AssociateAddress"); ok && assoc.Params.Get("AllowReassociation") == "true" {
		t.Errorf("AssociateAddress with AllowReassociation=true")
	}
	served, faults := px.Served(), px.Faults()
	t.Logf("injected faults %v; served by the proxy %v", faults, served)
	if served["invisible"] == 0 || served["PENDING"] == 0 || served["provisioning"] == 0 || served["initial"] == 0 || served["healthy"] == 0 {
		t.Errorf("the proxy did not serve every production behaviour: %v", served)
	}
	if faults[awstest.FaultThrottle] == 0 || faults[awstest.Fault5xx] == 0 {
		t.Errorf("faults not injected: %v", faults)
	}

	for i := len(names) - 1; i >= 0; i-- {
		mark := px.Mark()
		start := time.Now()
		if err := e.remove(ctx, names[i], nil); err != nil {
			t.Fatalf("remove %s: %v", names[i], err)
		}
		t.Logf("remove %s: %s, API calls %s", names[i], time.Since(start).Round(time.Millisecond), awstest.FormatCounts(px.CountsSince(mark)))
	}
	e.assertConverged(ctx, c.Master)
	if s := px.Served(); s["draining"] == 0 {
		t.Errorf("removals never saw a target draining for the deregistration delay: %v", s)
	}
	if _, err := os.Stat(filepath.Join(c.Settings.StateDir, c.Name, "aws", "addresses.json")); err == nil {
		b, _ := os.ReadFile(filepath.Join(c.Settings.StateDir, c.Name, "aws", "addresses.json"))
		for _, n := range names {
			if strings.Contains(string(b), n) {
				t.Errorf("address reservation of %s left behind: %s", n, b)
			}
		}
	}
}

// waitNodes polls the data plane's node processes until they are want, for
// at most 10 s, and returns the last seen.
func waitNodes(ctx context.Context, c *awstest.Cluster, want []string) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := c.VMs.Nodes()
		if slices.Equal(got, want) {
			return got
		}
		select {
		case <-ctx.Done():
			return got
		case <-tick.C:
		}
	}
}
