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
// make these two calls idempotent the same way (cluster/aws/util.sh):
// import-public-key ignores InvalidKeyPair.Duplicate, and
// create-security-group creates the group only if no group of that name is
// in the VPC.

// ImportKeyPair imports a public key as kube-up's import-public-key does:
// a key pair of that name already there is not an error.
func ImportKeyPair(ctx context.Context, ec *ec2.Client, name string, pub []byte) error {
	_, err := ec.ImportKeyPair(ctx, &ec2.ImportKeyPairInput{KeyName: aws.String(name), PublicKeyMaterial: pub})
	if apiCode(err) == "InvalidKeyPair.Duplicate" {
		return nil
	}
	return err
}

// EnsureSecurityGroup returns the ID of the VPC's security group named in
// in, creating it first if there is none (kube-up's create-security-group).
func EnsureSecurityGroup(ctx context.Context, ec *ec2.Client, in *ec2.CreateSecurityGroupInput) (string, error) {
	find := func() (string, error) {
		out, err := ec.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
			{Name: aws.String("group-name"), Values: []string{aws.ToString(in.GroupName)}},
			{Name: aws.String("vpc-id"), Values: []string{aws.ToString(in.VpcId)}}}})
		if err != nil {
			return "", fmt.Errorf("describe-security-groups %s: %w", aws.ToString(in.GroupName), err)
		}
		if len(out.SecurityGroups) == 0 {
			return "", nil
		}
		return aws.ToString(out.SecurityGroups[0].GroupId), nil
	}
	if id, err := find(); err != nil || id != "" {
		return id, err
	}
	out, err := ec.CreateSecurityGroup(ctx, in)
	if apiCode(err) == "InvalidGroup.Duplicate" {
		return find()
	}
	if err != nil {
		return "", fmt.Errorf("create-security-group %s: %w", aws.ToString(in.GroupName), err)
	}
	return aws.ToString(out.GroupId), nil
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
