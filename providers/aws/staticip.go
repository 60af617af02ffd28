package aws

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
)

// staticIP implements lb.StaticIP with the cluster's Elastic IP, the one
// tagged hamaster.io/cluster=<cluster>.
type staticIP struct{ p *Provider }

// eip is the Elastic IP as EC2 reports it now.
type eip struct {
	allocationID, publicIP string
	associationID          string
	instanceID             string // "" when unassociated or on a non-instance ENI
	eni                    string
}

func (s *staticIP) describe(ctx context.Context) (eip, error) {
	out, err := s.p.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []types.Filter{filter("tag:"+TagCluster, s.p.cluster), filter("domain", "vpc")}})
	if err != nil {
		return eip{}, mapErr(err, "describe the Elastic IP of cluster %s", s.p.cluster)
	}
	switch len(out.Addresses) {
	case 0:
		if id := s.p.unadopted; id != "" {
			return eip{}, errkind.Errorf(errkind.NotFound, "cluster %s has no Elastic IP tagged %s=%s: kube-up's master 0 (%s) is not adopted yet; hamaster's first change (add-replica, rolling-upgrade, rotate-certs, remove-replica or recover, not a dry run) tags it, its data volume and its Elastic IP in its adopt step, and read-only commands change nothing", s.p.cluster, TagCluster, s.p.cluster, id)
		}
		return eip{}, errkind.Errorf(errkind.NotFound, "cluster %s has no Elastic IP tagged %s=%s", s.p.cluster, TagCluster, s.p.cluster)
	case 1:
	default:
		return eip{}, errkind.Errorf(errkind.FailedPrecondition, "cluster %s has %d Elastic IPs tagged %s=%s; want one", s.p.cluster, len(out.Addresses), TagCluster, s.p.cluster)
	}
	a := out.Addresses[0]
	return eip{
		allocationID: aws.ToString(a.AllocationId), publicIP: aws.ToString(a.PublicIp),
		associationID: aws.ToString(a.AssociationId), instanceID: aws.ToString(a.InstanceId), eni: aws.ToString(a.NetworkInterfaceId),
	}, nil
}

// nameOf returns the Name tag of an instance (cached: it never changes).
func (p *Provider) nameOf(ctx context.Context, id string) (string, error) {
	if v, ok := p.names.Load(id); ok {
		return v.(string), nil
	}
	is, err := p.inst.describeInput(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return "", err
	}
	if len(is) == 0 {
		return "", errkind.Errorf(errkind.NotFound, "instance %s not found", id)
	}
	return is[0].name, nil
}

// Get implements lb.StaticIP.
func (s *staticIP) Get(ctx context.Context) (string, string, error) {
	e, err := s.describe(ctx)
	if err != nil {
		return "", "", err
	}
	ip := s.p.amap.toNet(e.publicIP)
	if e.instanceID == "" {
		return ip, "", nil
	}
	name, err := s.p.nameOf(ctx, e.instanceID)
	if err != nil {
		return "", "", err
	}
	return ip, name, nil
}

// Attach implements lb.StaticIP: AssociateAddress without
// AllowReassociation, so an address held elsewhere is never taken away. An
// address still on a deleted load balancer's interface is waited for.
func (s *staticIP) Attach(ctx context.Context, replica string) error {
	is, err := s.p.inst.describe(ctx, replica)
	if err != nil {
		return err
	}
	if len(is) == 0 {
		return errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s", replica, s.p.cluster)
	}
	id := is[0].id
	var e eip
	err = s.p.pollUntil(ctx, "the Elastic IP to leave the deleted load balancer", func() (bool, error) {
		if e, err = s.describe(ctx); err != nil {
			return false, err
		}
		if e.associationID == "" || e.instanceID != "" {
			return true, nil
		}
		exists, err := lb.Exists(ctx, s.p.lbal)
		if err != nil {
			return false, err
		}
		if exists {
			return false, errkind.Errorf(errkind.FailedPrecondition, "Elastic IP %s is owned by the load balancer; delete it first", e.publicIP)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	switch {
	case e.instanceID == id:
		return nil
	case e.instanceID != "":
		holder, _ := s.p.nameOf(ctx, e.instanceID)
		return errkind.Errorf(errkind.FailedPrecondition, "Elastic IP %s is attached to %s (%s); detach it first", e.publicIP, holder, e.instanceID)
	}
	if _, err := s.p.ec2.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: aws.String(e.allocationID), InstanceId: aws.String(id), AllowReassociation: aws.Bool(false)}); err != nil {
		return mapErr(err, "associate Elastic IP %s with %s (%s)", e.publicIP, replica, id)
	}
	return s.p.pollUntil(ctx, fmt.Sprintf("Elastic IP %s to show on %s", e.publicIP, replica), func() (bool, error) {
		cur, err := s.describe(ctx)
		return err == nil && cur.instanceID == id, err
	})
}

// Detach implements lb.StaticIP: DisassociateAddress from the instance
// holding it, then wait until EC2 reports it unassociated. An address on a
// load balancer is not a replica's: nothing to do.
func (s *staticIP) Detach(ctx context.Context) error {
	e, err := s.describe(ctx)
	if err != nil || e.instanceID == "" {
		return err
	}
	if _, err := s.p.ec2.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: aws.String(e.associationID)}); err != nil && code(err) != "InvalidAssociationID.NotFound" {
		return mapErr(err, "disassociate Elastic IP %s from %s", e.publicIP, e.instanceID)
	}
	return s.p.pollUntil(ctx, fmt.Sprintf("Elastic IP %s to leave %s", e.publicIP, e.instanceID), func() (bool, error) {
		cur, err := s.describe(ctx)
		return err == nil && cur.instanceID == "", err
	})
}
