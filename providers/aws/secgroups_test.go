package aws_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/testbed/aws/awstest/kubeupmaster"
)

// TestSecurityGroupCheck: before the Elastic IP leaves master 0, the
// provider checks that the masters' security group lets the NLB's health
// checks (from the VPC) and the clients in, and names the missing rule
// instead of letting the promotion time out.
func TestSecurityGroupCheck(t *testing.T) {
	t.Parallel()
	c := awstest.UpKubeUp(t, "sg", awstest.KubeUpOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	prep, ok := c.Provider.LoadBalancer().(lb.Preparer)
	if !ok {
		t.Fatal("the aws load balancer is not an lb.Preparer")
	}
	tcp := func(from, to int32, cidr string) ec2types.IpPermission {
		return ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(from), ToPort: aws.Int32(to), IpRanges: []ec2types.IpRange{{CidrIp: aws.String(cidr)}}}
	}
	all := ec2types.IpPermission{IpProtocol: aws.String("-1"), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("0.0.0.0/0")}}}
	// kube-up's masters serve on 443; the VPC is kube-up's 172.20.0.0/16.
	const port = 443
	vpcRule := "tcp/443 from " + awstest.KubeUpVPCCIDR
	clientRule := "tcp/443 from 0.0.0.0/0"
	for _, tc := range []struct {
		name    string
		rules   []ec2types.IpPermission
		missing []string
	}{
		{"no rule", nil, []string{vpcRule, clientRule}},
		{"wrong port", []ec2types.IpPermission{tcp(6443, 6443, "0.0.0.0/0")}, []string{vpcRule, clientRule}},
		{"VPC only", []ec2types.IpPermission{tcp(port, port, awstest.KubeUpVPCCIDR)}, []string{clientRule}},
		{"one subnet and clients elsewhere", []ec2types.IpPermission{tcp(port, port, awstest.KubeUpSubnetCIDR), tcp(port, port, "203.0.113.0/24")}, []string{vpcRule, clientRule}},
		{"port range from anywhere", []ec2types.IpPermission{tcp(1, 1024, "0.0.0.0/0")}, nil},
		{"all traffic", []ec2types.IpPermission{all}, nil},
	} {
		// Not parallel: the cases share the master's security group.
		t.Run(tc.name, func(t *testing.T) {
			setIngress(ctx, t, c, tc.rules)
			err := prep.Prepare(ctx, []lb.Target{{Name: c.Master}})
			if len(tc.missing) == 0 {
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				return
			}
			if !errors.Is(err, errkind.FailedPrecondition) {
				t.Fatalf("Prepare: %v, want a FailedPrecondition naming %v", err, tc.missing)
			}
			for _, m := range tc.missing {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error does not name the missing rule %q:\n%v", m, err)
				}
			}
			if !strings.Contains(err.Error(), "authorize-security-group-ingress --group-id "+c.SecurityGroup) {
				t.Errorf("error does not say how to add the rule:\n%v", err)
			}
			if n := strings.Count(err.Error(), "tcp/443 from"); n != len(tc.missing) {
				t.Errorf("error names %d rules, want %d:\n%v", n, len(tc.missing), err)
			}
		})
	}
}

// setIngress replaces the master security group's ingress rules.
func setIngress(ctx context.Context, t *testing.T, c *awstest.Cluster, rules []ec2types.IpPermission) {
	t.Helper()
	out, err := c.EC2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{c.SecurityGroup}})
	if err != nil {
		t.Fatal(err)
	}
	if cur := out.SecurityGroups[0].IpPermissions; len(cur) > 0 {
		if _, err := c.EC2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: aws.String(c.SecurityGroup), IpPermissions: cur}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rules) > 0 {
		if err := kubeupmaster.AuthorizeIngress(ctx, c.EC2, c.SecurityGroup, rules); err != nil {
			t.Fatal(err)
		}
	}
}
