package awstest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/hamaster/hamaster/testbed/aws/awstest/kubeupmaster"
)

// TestNLBStates walks one NLB and one target through every state the
// proxy adds to moto, in AWS's order, with the SDK talking to the proxy:
// provisioning → active; a target in a zone the NLB does not cover is
// unused (Target.NotInUse) until SetSubnets enables the zone, then initial
// until the data plane says it passed its checks, then healthy;
// deregistered, it is draining for the (scaled) delay, then gone.
func TestNLBStates(t *testing.T) {
	t.Parallel()
	m := StartMoto(t)
	// provisioning 3.6 s, the 120 s deregistration delay 2.4 s: long enough
	// that the three moto calls after CreateLoadBalancer still see it
	// provisioning while other race-instrumented packages share the CPUs
	// (at 0.005, 0.9 s, they could not always).
	timing := Timing{Scale: 0.02}
	px := NewProxy(t, m.URL, timing)
	cfg := aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")}
	direct := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(m.URL) })
	lbc := elb.NewFromConfig(cfg, func(o *elb.Options) { o.BaseEndpoint = aws.String(px.URL) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	vpc, err := direct.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.0.0.0/16")})
	must(err, "CreateVpc")
	subnet := map[string]string{}
	for z, cidr := range map[string]string{Zone: "10.0.1.0/24", ZoneB: "10.0.2.0/24"} {
		subnet[z], err = kubeupmaster.EnsureSubnet(ctx, direct, &ec2.CreateSubnetInput{VpcId: vpc.Vpc.VpcId, CidrBlock: aws.String(cidr), AvailabilityZone: aws.String(z)})
		must(err, "CreateSubnet")
	}
	eip, err := direct.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc})
	must(err, "AllocateAddress")
	imgs, err := direct.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	must(err, "DescribeImages")
	run, err := direct.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: imgs.Images[0].ImageId, MinCount: aws.Int32(1), MaxCount: aws.Int32(1), SubnetId: aws.String(subnet[ZoneB])})
	must(err, "RunInstances")
	id := aws.ToString(run.Instances[0].InstanceId)

	var passed atomic.Bool // the data plane's verdict
	px.SetHealth(func(string) (string, string, string) {
		if passed.Load() {
			return "healthy", "", ""
		}
		return "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
	}, func(string) string { return ZoneB })

	created := time.Now()
	out, err := lbc.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{Name: aws.String("hm-t"), Type: elbtypes.LoadBalancerTypeEnumNetwork,
		SubnetMappings: []elbtypes.SubnetMapping{{SubnetId: aws.String(subnet[Zone]), AllocationId: eip.AllocationId}}})
	must(err, "CreateLoadBalancer")
	arn := out.LoadBalancers[0].LoadBalancerArn
	tg, err := lbc.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{Name: aws.String("hm-t-api"), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(6443), VpcId: vpc.Vpc.VpcId,
		TargetType: elbtypes.TargetTypeEnumInstance, HealthCheckIntervalSeconds: aws.Int32(10), HealthyThresholdCount: aws.Int32(2)})
	must(err, "CreateTargetGroup")
	tgARN := tg.TargetGroups[0].TargetGroupArn
	_, err = lbc.ModifyTargetGroupAttributes(ctx, &elb.ModifyTargetGroupAttributesInput{TargetGroupArn: tgARN,
		Attributes: []elbtypes.TargetGroupAttribute{{Key: aws.String("deregistration_delay.timeout_seconds"), Value: aws.String("120")}}})
	must(err, "ModifyTargetGroupAttributes")
	_, err = lbc.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: arn, Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(6443),
		DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: tgARN}}})
	must(err, "CreateListener")

	lbState := func() (string, []string) {
		t.Helper()
		d, err := lbc.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerArns: []string{aws.ToString(arn)}})
		must(err, "DescribeLoadBalancers")
		var zones []string
		for _, az := range d.LoadBalancers[0].AvailabilityZones {
			z := aws.ToString(az.ZoneName)
			for _, a := range az.LoadBalancerAddresses {
				if a.AllocationId != nil {
					z += "=" + aws.ToString(a.AllocationId)
				} else {
					z += " " + aws.ToString(a.IpAddress) // AWS-assigned
				}
			}
			zones = append(zones, z)
		}
		return string(d.LoadBalancers[0].State.Code), zones
	}
	health := func() string {
		t.Helper()
		d, err := lbc.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tgARN})
		must(err, "DescribeTargetHealth")
		if len(d.TargetHealthDescriptions) == 0 {
			return "absent"
		}
		h := d.TargetHealthDescriptions[0].TargetHealth
		return string(h.State) + "/" + string(h.Reason)
	}
	// waitFor polls until get returns want, and fails on a value that is
	// neither want nor one of the states allowed before it.
	waitFor := func(what string, get func() string, want string, before ...string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got := get()
			if got == want {
				return time.Since(start)
			}
			ok := false
			for _, b := range before {
				ok = ok || got == b
			}
			if !ok {
				t.Fatalf("%s: %q, want %q (or, before it, %v)", what, got, want, before)
			}
			select {
			case <-ctx.Done():
				// The test's minute: a hang guard, over 10 x the scaled
				// delays (3.6 s, 2.4 s).
				t.Fatalf("hang guard: %s: still %q, want %q", what, got, want)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	st, zones := lbState()
	if st != "provisioning" || len(zones) != 1 || zones[0] != Zone+"="+aws.ToString(eip.AllocationId) {
		t.Fatalf("new NLB: %s %v, want provisioning in %s with the Elastic IP", st, zones, Zone)
	}
	_, err = lbc.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tgARN, Targets: []elbtypes.TargetDescription{{Id: aws.String(id)}}})
	must(err, "RegisterTargets")
	if h := health(); h != "initial/Elb.RegistrationInProgress" {
		t.Errorf("target of a provisioning NLB: %s", h)
	}
	waitFor("NLB state", func() string { s, _ := lbState(); return s }, "active", "provisioning")
	// Fidelity, not speed: never active before AWS's provisioning time
	// (scaled); a slow machine only lengthens it.
	if d := time.Since(created); d < timing.D(AWSProvisioning) {
		t.Errorf("active after %s, before the scaled provisioning time %s", d, timing.D(AWSProvisioning))
	}
	if h := health(); h != "unused/Target.NotInUse" {
		t.Errorf("target in a zone the NLB does not cover: %s, want unused/Target.NotInUse", h)
	}
	_, err = lbc.SetSubnets(ctx, &elb.SetSubnetsInput{LoadBalancerArn: arn, SubnetMappings: []elbtypes.SubnetMapping{
		{SubnetId: aws.String(subnet[Zone]), AllocationId: eip.AllocationId}, {SubnetId: aws.String(subnet[ZoneB])}}})
	must(err, "SetSubnets")
	if _, zones := lbState(); len(zones) != 2 || zones[0] != Zone+"="+aws.ToString(eip.AllocationId) || zones[1] != ZoneB+" "+AssignedNet+"11" {
		t.Errorf("after SetSubnets: zones %v, want the Elastic IP kept in %s and %s added", zones, Zone, ZoneB)
	}
	if h := health(); h != "initial/Elb.InitialHealthChecking" {
		t.Errorf("target before its checks pass: %s", h)
	}
	passed.Store(true)
	if h := health(); h != "healthy/" {
		t.Errorf("target after its checks pass: %s", h)
	}
	deregistered := time.Now()
	_, err = lbc.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: tgARN, Targets: []elbtypes.TargetDescription{{Id: aws.String(id)}}})
	must(err, "DeregisterTargets")
	// The SDK's TargetDeregistered waiter asks about the target by ID.
	byID, err := lbc.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tgARN, Targets: []elbtypes.TargetDescription{{Id: aws.String(id)}}})
	must(err, "DescribeTargetHealth by ID")
	if len(byID.TargetHealthDescriptions) != 1 || byID.TargetHealthDescriptions[0].TargetHealth.State != "draining" {
		t.Errorf("target asked about by ID right after deregistration: %+v, want draining", byID.TargetHealthDescriptions)
	}
	waitFor("deregistered target", health, "absent", "draining/Target.DeregistrationInProgress")
	if d := time.Since(deregistered); d < timing.D(120*time.Second) {
		t.Errorf("draining ended after %s, before the scaled delay %s", d, timing.D(120*time.Second))
	}
	if s := px.Served(); s["draining"] == 0 || s["provisioning"] == 0 || s["unused"] == 0 {
		t.Errorf("states served: %v", s)
	}
}
