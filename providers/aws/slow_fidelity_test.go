//go:build fidelity

// Run by .ci/run's cloud-slow tier after 'make test', which stays under
// 10 minutes on 2 cores: the rolling upgrade waits on each recreated
// instance's boot and the NLB's health checks (~140 s); the DNS
// endpoint's grow and shrink (~50 s) repeats TestAddRemove1to3to1's
// steps with Route53 records.

package aws_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/hamaster/hamaster/kubeenv"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/testbed/aws/awstest/kubeupmaster"
	"github.com/hamaster/hamaster/workflows"
)

// TestRollingUpgrade upgrades a 3-replica cluster one instance at a time
// (recreate strategy): every instance is replaced, every data volume is
// kept (same volume IDs), and the cluster converges at the new version.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "upg", awstest.KubeUpOptions{})
	c := e.c
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := []string{"upg-master-b01", "upg-master-b02"}
	for _, n := range names {
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
	}
	volumes := func() (map[string]string, map[string]string) {
		vols, err := c.EC2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagRole), Values: []string{"data"}}}})
		if err != nil {
			t.Fatal(err)
		}
		vol, inst := map[string]string{}, map[string]string{}
		for _, v := range vols.Volumes {
			for _, tg := range v.Tags {
				if aws.ToString(tg.Key) == awsp.TagReplica {
					vol[aws.ToString(tg.Value)] = aws.ToString(v.VolumeId)
					if len(v.Attachments) > 0 {
						inst[aws.ToString(tg.Value)] = aws.ToString(v.Attachments[0].InstanceId)
					}
				}
			}
		}
		return vol, inst
	}
	volBefore, instBefore := volumes()
	mark := c.Proxy.Mark()
	start := time.Now()
	d := e.deps(nil)
	p := workflows.UpgradeParams{Version: "v1.31.0", Strategy: workflows.StrategyRecreate, HealthTimeout: time.Minute}
	if err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, p, 3), workflows.Options{}); err != nil {
		t.Fatalf("rolling upgrade: %v", err)
	}
	t.Logf("rolling upgrade of 3: %s, API calls %s", time.Since(start).Round(time.Millisecond), awstest.FormatCounts(c.Proxy.CountsSince(mark)))
	e.assertConverged(ctx, c.Master, names[0], names[1])
	volAfter, instAfter := volumes()
	rs, err := c.Provider.Instances().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Template.Version != "v1.31.0" {
			t.Errorf("%s runs %s after the upgrade", r.Name, r.Template.Version)
		}
		// Written as kube-up's upgrade writes it: the release tarball
		// (tars_from_version), never KUBE_VERSION.
		if want, _ := kubeenv.ReleaseURLs(c.KubeUp.Releases.URL(), "v1.31.0"); r.Template.Env[kubeenv.ServerBinaryTarURL] != want || r.Template.Env[kubeenv.KubeVersion] != "" {
			t.Errorf("%s: kube-env %s=%q %s=%q; want %s and no %s", r.Name, kubeenv.ServerBinaryTarURL, r.Template.Env[kubeenv.ServerBinaryTarURL],
				kubeenv.KubeVersion, r.Template.Env[kubeenv.KubeVersion], want, kubeenv.KubeVersion)
		}
		if volAfter[r.Name] != volBefore[r.Name] {
			t.Errorf("%s: data volume %s replaced by %s", r.Name, volBefore[r.Name], volAfter[r.Name])
		}
		if instAfter[r.Name] == instBefore[r.Name] {
			t.Errorf("%s: instance %s not replaced", r.Name, instBefore[r.Name])
		}
		if st, ok := c.VMs.NodeStatus(r.Name); !ok || st.Version != "v1.31.0" {
			t.Errorf("%s node reports %+v", r.Name, st)
		}
	}
}

// TestAddRemoveDNSEndpoint grows 1→3→1 with the DNS endpoint: master 0
// keeps the Elastic IP throughout, the name is an alias to the NLB while
// there is more than one master and an A record to the Elastic IP before
// and after, and nothing is left behind.
func TestAddRemoveDNSEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "dnsep", awstest.KubeUpOptions{EndpointMode: "dns"})
	c := e.c
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.Proxy.PendingChanges(2)
	names := []string{"dnsep-master-a01", "dnsep-master-b02"}
	for k, n := range names {
		if err := e.addIn(ctx, n, []string{awstest.Zone, awstest.ZoneB}[k], nil); err != nil {
			t.Fatalf("add %s: %v (vms: %v)", n, err, c.VMs.LastError())
		}
	}
	e.assertConverged(ctx, c.Master, names[0], names[1])

	// The NLB's health checks honour the masters' security group: without
	// kube-up's tcp/443 rule every target times out; with it back, they
	// are healthy again.
	rule := []ec2types.IpPermission{{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(443), ToPort: aws.Int32(443), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("0.0.0.0/0")}}}}
	if _, err := c.EC2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(c.SecurityGroup), IpPermissions: rule}); err != nil {
		t.Fatal(err)
	}
	e.waitTargets(ctx, "unhealthy", "Target.Timeout", 3)
	if err := kubeupmaster.AuthorizeIngress(ctx, c.EC2, c.SecurityGroup, rule); err != nil {
		t.Fatal(err)
	}
	e.waitTargets(ctx, "healthy", "", 3)

	for i := len(names) - 1; i >= 0; i-- {
		if err := e.remove(ctx, names[i], nil); err != nil {
			t.Fatalf("remove %s: %v", names[i], err)
		}
	}
	e.assertConverged(ctx, c.Master)
}

// waitTargets waits (bounded) until the NLB's n targets are all in state
// with reason, as DescribeTargetHealth answers through the proxy.
func (e *env) waitTargets(ctx context.Context, state, reason string, n int) {
	t, c := e.t, e.c
	t.Helper()
	viaProxy := elb.NewFromConfig(aws.Config{Region: awstest.Region, Credentials: c.ELB.Options().Credentials, BaseEndpoint: aws.String(c.Proxy.URL)})
	tgs, err := c.ELB.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{})
	if err != nil || len(tgs.TargetGroups) != 1 {
		t.Fatalf("target groups: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last []string
	for {
		th, err := viaProxy.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tgs.TargetGroups[0].TargetGroupArn})
		if err == nil {
			last = nil
			ok := len(th.TargetHealthDescriptions) == n
			for _, d := range th.TargetHealthDescriptions {
				last = append(last, aws.ToString(d.Target.Id)+"="+string(d.TargetHealth.State)+"/"+string(d.TargetHealth.Reason))
				ok = ok && string(d.TargetHealth.State) == state && string(d.TargetHealth.Reason) == reason
			}
			if ok {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("targets never all %s/%s: %v", state, reason, last)
		case <-tick.C:
		}
	}
}
