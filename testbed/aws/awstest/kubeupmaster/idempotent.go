package kubeupmaster

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// The test bed's clients retry moto's 500s (see awstest.MotoRetryer), and
// moto can answer 500 after it has made the change. kube-up's own scripts
// make its creates idempotent the same way (cluster/aws/util.sh):
// import-public-key ignores InvalidKeyPair.Duplicate, and the VPC, the
// subnets, the security groups and the master's disk are created only when
// a look finds none.

// ImportKeyPair imports a public key as kube-up's import-public-key does:
// a key pair of that name already there is not an error.
func ImportKeyPair(ctx context.Context, ec *ec2.Client, name string, pub []byte) error {
	_, err := ec.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String(name), PublicKeyMaterial: pub})
	if apiCode(err) == "InvalidKeyPair.Duplicate" {
		return nil
	}
	return err
}

// ensure is kube-up's find-then-create (get_vpc_id before create-vpc,
// get_subnet_id before create-subnet, find-master-pd before
// ensure-master-pd): find, and create only when find finds nothing. The
// create is tried once (no SDK retry: a retried create of something moto
// made before answering 500 makes a second one, or is refused as a
// duplicate), and each round looks first, so a create that did happen is
// found by the next round.
func ensure(ctx context.Context, what string, find func(context.Context) (string, error), create func(context.Context, func(*ec2.Options)) (string, error)) (string, error) {
	once := func(o *ec2.Options) { o.RetryMaxAttempts = 1 }
	var last error
	for range 10 {
		id, err := find(ctx)
		if err != nil {
			return "", fmt.Errorf("find %s: %w", what, err)
		}
		if id != "" {
			return id, nil
		}
		if id, last = create(ctx, once); last == nil {
			return id, nil
		}
	}
	return "", fmt.Errorf("create %s: %w", what, last)
}

// EnsureSecurityGroup returns the ID of the VPC's security group named in
// in, creating it first if there is none (kube-up's create-security-group).
func EnsureSecurityGroup(ctx context.Context, ec *ec2.Client, in *ec2.CreateSecurityGroupInput) (string, error) {
	return ensure(ctx, "security group "+aws.ToString(in.GroupName), func(ctx context.Context) (string, error) {
		out, err := ec.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
			filter("group-name", aws.ToString(in.GroupName)), filter("vpc-id", aws.ToString(in.VpcId))}})
		if err != nil || len(out.SecurityGroups) == 0 {
			return "", err
		}
		return aws.ToString(out.SecurityGroups[0].GroupId), nil
	}, func(ctx context.Context, once func(*ec2.Options)) (string, error) {
		out, err := ec.CreateSecurityGroup(ctx, in, once)
		if err != nil {
			return "", err
		}
		return aws.ToString(out.GroupId), nil
	})
}

// EnsureVPC returns the ID of the VPC tagged Name=<name> and
// KubernetesCluster=<cluster>, creating it from in first if there is none
// (kube-up's get_vpc_id, then create-vpc).
func EnsureVPC(ctx context.Context, ec *ec2.Client, cluster, name string, in *ec2.CreateVpcInput) (string, error) {
	return ensure(ctx, "VPC "+name, func(ctx context.Context) (string, error) {
		out, err := ec.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{Filters: []ec2types.Filter{
			filter("tag:Name", name), filter("tag:KubernetesCluster", cluster)}})
		if err != nil || len(out.Vpcs) == 0 {
			return "", err
		}
		return aws.ToString(out.Vpcs[0].VpcId), nil
	}, func(ctx context.Context, once func(*ec2.Options)) (string, error) {
		out, err := ec.CreateVpc(ctx, in, once)
		if err != nil {
			return "", err
		}
		return aws.ToString(out.Vpc.VpcId), nil
	})
}

// EnsureSubnet returns the ID of in's VPC's subnet with in's CIDR block,
// creating it first if there is none (kube-up's get_subnet_id, then
// create-subnet).
func EnsureSubnet(ctx context.Context, ec *ec2.Client, in *ec2.CreateSubnetInput) (string, error) {
	return ensure(ctx, "subnet "+aws.ToString(in.CidrBlock), func(ctx context.Context) (string, error) {
		out, err := ec.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
			filter("vpc-id", aws.ToString(in.VpcId)), filter("cidr-block", aws.ToString(in.CidrBlock))}})
		if err != nil || len(out.Subnets) == 0 {
			return "", err
		}
		return aws.ToString(out.Subnets[0].SubnetId), nil
	}, func(ctx context.Context, once func(*ec2.Options)) (string, error) {
		out, err := ec.CreateSubnet(ctx, in, once)
		if err != nil {
			return "", err
		}
		return aws.ToString(out.Subnet.SubnetId), nil
	})
}

func filter(name, value string) ec2types.Filter {
	return ec2types.Filter{Name: aws.String(name), Values: []string{value}}
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// AuthorizeIngress adds ingress rules; rules already there are not an error
// (InvalidPermission.Duplicate), as kube-up's
// authorize-security-group-ingress ignores them.
func AuthorizeIngress(ctx context.Context, ec *ec2.Client, groupID string, rules []ec2types.IpPermission) error {
	_, err := ec.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: aws.String(groupID), IpPermissions: rules})
	if apiCode(err) == "InvalidPermission.Duplicate" {
		return nil
	}
	return err
}
