package awstest

import (
	"context"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/hamaster/hamaster/providers"
)

// Region is the region tests use.
const Region = "us-east-1"

// Cluster is a kube-up AWS cluster in moto behind the proxy, its
// instances played by the namespace VPC (UpKubeUp).
type Cluster struct {
	Name string
	// EndpointMode is the provider's --aws-endpoint-mode.
	EndpointMode string
	Settings     providers.Settings
	Provider     providers.Provider
	Moto         *Moto
	Proxy        *Proxy
	// VMs is the data plane (the same as KubeUp.Plane).
	VMs *VPCPlane
	// KubeUp is what UpKubeUp made besides.
	KubeUp *KubeUpCluster
	// Direct clients to moto (not through the proxy).
	EC2 *ec2.Client
	ELB *elb.Client
	R53 *route53.Client

	ZoneID, VPC, Subnet, SecurityGroup string
	// SubnetB is a second subnet, in ZoneB: replicas there make the
	// provider enable the NLB in a second zone (SetSubnets).
	SubnetB, ZoneB             string
	EIPAllocation, EIPPublicIP string
	// StaticIP is the Elastic IP's address (reachable from the
	// operator's namespace).
	StaticIP string
	Master   string
}

// DefaultScale runs AWS's NLB timing 100 times faster: provisioning 1.8 s,
// a 10 s health-check interval 100 ms, a 120 s deregistration delay 1.2 s.
const DefaultScale = 0.01

// Zone is the zone of the master's subnet; ZoneB that of the second one.
const (
	Zone  = Region + "a"
	ZoneB = Region + "b"
)

// Master 0's instance profile and KMS key (moto checks that the profile
// exists; any key ARN is accepted).
const (
	InstanceProfile    = "kubernetes-master"
	InstanceProfileARN = "arn:aws:iam::123456789012:instance-profile/" + InstanceProfile
	KMSKey             = "arn:aws:kms:us-east-1:123456789012:key/0f7e6c1a-hamaster-test"
)

// createInstanceProfile creates an IAM instance profile in moto (the
// module has no IAM client).
func createInstanceProfile(ctx context.Context, motoURL, name string) error {
	return motoQuery(ctx, motoURL, "iam", url.Values{"Action": {"CreateInstanceProfile"}, "Version": {"2010-05-08"}, "InstanceProfileName": {name}})
}
