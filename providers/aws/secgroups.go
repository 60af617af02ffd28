package aws

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
)

// An NLB with instance targets preserves the client's address, and it has
// no security group of its own (hamaster creates it without): the masters'
// security groups must let in both
//   - the NLB's health checks, which come from the NLB's private addresses
//     in the VPC (so: the VPC's CIDR), on the health-check port, and
//   - the clients (--aws-client-cidrs, default 0.0.0.0/0), on the
//     listener's port.
// Without them the targets stay unhealthy and the promotion would only
// time out; checkSecurityGroups says which rule is missing first, before
// anything changes. (kube-up's AWS masters allow 443 from 0.0.0.0/0 and
// everything from the master and node groups: util.sh
// create-security-group / authorize-security-group-ingress; the health
// checks from the VPC are the rule it never needed.)

// required is one ingress a master must allow.
type required struct {
	cidr netip.Prefix
	port int32
	why  string
}

// parseCIDRs parses --aws-client-cidrs.
func parseCIDRs(v string) ([]netip.Prefix, error) {
	if strings.TrimSpace(v) == "" {
		return []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, nil
	}
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || !p.Addr().Is4() {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--%s: %q is not an IPv4 CIDR (valid: e.g. 0.0.0.0/0,203.0.113.0/24)", OptClientCIDRs, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// allows reports whether a permission lets tcp port in from every address
// of cidr.
func allows(perm types.IpPermission, cidr netip.Prefix, port int32) bool {
	proto := aws.ToString(perm.IpProtocol)
	if proto != "-1" && proto != "tcp" && proto != "6" {
		return false
	}
	if proto != "-1" && (aws.ToInt32(perm.FromPort) > port || aws.ToInt32(perm.ToPort) < port) {
		return false
	}
	for _, r := range perm.IpRanges {
		p, err := netip.ParsePrefix(aws.ToString(r.CidrIp))
		if err == nil && p.Bits() <= cidr.Bits() && p.Contains(cidr.Addr()) {
			return true
		}
	}
	return false
}

// checkSecurityGroups checks that the security groups of instance i let
// the NLB's health checks and the clients reach the apiserver port; the
// error names each missing rule and the command that adds it.
func (p *Provider) checkSecurityGroups(ctx context.Context, i instance) error {
	ids := securityGroups(i.raw)
	if len(ids) == 0 {
		return nil // nothing to read: EC2 always reports at least one
	}
	vpcs, err := p.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{i.vpc}})
	if err != nil {
		return mapErr(err, "describe VPC %s of %s", i.vpc, i.name)
	}
	var need []required
	port := int32(p.apiPort)
	for _, v := range vpcs.Vpcs {
		if c, err := netip.ParsePrefix(aws.ToString(v.CidrBlock)); err == nil {
			need = append(need, required{c.Masked(), port, "NLB health checks come from the load balancer's private addresses in VPC " + i.vpc})
		}
	}
	for _, c := range p.clientCIDRs {
		need = append(need, required{c, port, fmt.Sprintf("clients of the NLB keep their own address (--%s)", OptClientCIDRs)})
	}
	sgs, err := p.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: ids})
	if err != nil {
		return mapErr(err, "describe security groups %v of %s", ids, i.name)
	}
	var missing []string
	for _, n := range need {
		ok := false
		for _, g := range sgs.SecurityGroups {
			for _, perm := range g.IpPermissions {
				ok = ok || allows(perm, n.cidr, n.port)
			}
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("tcp/%d from %s (%s): aws ec2 authorize-security-group-ingress --group-id %s --protocol tcp --port %d --cidr %s",
				n.port, n.cidr, n.why, ids[0], n.port, n.cidr))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return errkind.Errorf(errkind.FailedPrecondition, "security groups %s of %s let no NLB traffic in; missing ingress rule(s):\n  %s",
			strings.Join(ids, ","), i.name, strings.Join(missing, "\n  "))
	}
	return nil
}

// securityGroups are the instance's security group IDs: those of the
// instance and of its primary interface (moto reports only the latter when
// the launch named the interface).
func securityGroups(i types.Instance) []string {
	seen := map[string]bool{}
	var ids []string
	add := func(gs []types.GroupIdentifier) {
		for _, g := range gs {
			if id := aws.ToString(g.GroupId); id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	add(i.SecurityGroups)
	for _, ni := range i.NetworkInterfaces {
		if ni.Attachment != nil && aws.ToInt32(ni.Attachment.DeviceIndex) == 0 {
			add(ni.Groups)
		}
	}
	return ids
}
