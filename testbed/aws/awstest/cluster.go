package awstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

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

// createInstanceProfile creates an IAM instance profile in moto with one
// query-protocol call (the module has no IAM client; moto routes by the
// credential scope's service and does not check signatures).
func createInstanceProfile(ctx context.Context, motoURL, name string) error {
	form := url.Values{"Action": {"CreateInstanceProfile"}, "Version": {"2010-05-08"}, "InstanceProfileName": {name}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, motoURL+"/", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return nil
}
