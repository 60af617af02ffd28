package awstest

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/local/localtest"
)

// Region is the region tests use.
const Region = "us-east-1"

// Cluster is a kube-up-style single-master cluster in moto, with its VMs
// played by hamaster-node processes.
type Cluster struct {
	Name string
	// EndpointMode is the provider's --aws-endpoint-mode.
	EndpointMode string
	Settings     providers.Settings
	Provider     providers.Provider
	Moto         *Moto
	Proxy        *Proxy
	// VMs is the data plane: the loopback one (Up) or the namespace VPC
	// (UpKubeUp).
	VMs Plane
	// KubeUp is set by UpKubeUp.
	KubeUp *KubeUpCluster
	// Direct clients to moto (not through the proxy).
	EC2 *ec2.Client
	ELB *elb.Client
	R53 *route53.Client

	ZoneID, VPC, Subnet, SecurityGroup string
	// SubnetB is a second subnet, in ZoneB (10.0.2.0/24): replicas there
	// make the provider enable the NLB in a second zone (SetSubnets).
	SubnetB, ZoneB             string
	EIPAllocation, EIPPublicIP string
	// Net is N of the loopback 127.0.N.0/24 standing for the subnet;
	// StaticIP (127.0.N.1) stands for the Elastic IP. NetB stands for
	// SubnetB, NetLB for the addresses AWS assigns an NLB (AssignedNet).
	Net, NetB, NetLB int
	StaticIP         string
	CA               *certs.CA
	Master           string
}

// Options for Up.
type Options struct {
	Version string
	// EndpointMode is the provider's --aws-endpoint-mode: "eip-handover"
	// or "dns"; "" takes HAMASTER_AWS_ENDPOINT_MODE, else eip-handover
	// (the suite's historical path; the provider's own default with a
	// hosted zone is dns).
	EndpointMode string
	// MasterUserData, when set, is master 0's user data (not base64)
	// instead of hamaster's layout; the data plane boots only hamaster's
	// layout, so master 0 then has no running node and Up does not wait
	// for one.
	MasterUserData []byte
	// Timing scales AWS's NLB timing (provisioning, health-check interval,
	// deregistration delay); zero Scale means DefaultScale.
	Timing Timing
}

// DefaultScale runs AWS's NLB timing 100 times faster: provisioning 1.8 s,
// a 10 s health-check interval 100 ms, a 120 s deregistration delay 1.2 s.
const DefaultScale = 0.01

// Zone is the zone of the master's subnet; ZoneB that of the second one.
const (
	Zone  = Region + "a"
	ZoneB = Region + "b"
)

// Up creates the cluster and registers its teardown.
func Up(t *testing.T, name string, o Options) *Cluster {
	t.Helper()
	if o.Version == "" {
		o.Version = "v1.30.2"
	}
	if o.Timing.Scale <= 0 {
		o.Timing.Scale = DefaultScale
	}
	if o.EndpointMode == "" {
		o.EndpointMode = os.Getenv("HAMASTER_AWS_ENDPOINT_MODE")
	}
	if o.EndpointMode == "" {
		o.EndpointMode = "eip-handover"
	}
	m := StartMoto(t)
	px := NewProxy(t, m.URL, o.Timing)
	cfg := aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", ""), BaseEndpoint: aws.String(m.URL)}
	c := &Cluster{Name: name, Moto: m, Proxy: px, EC2: ec2.NewFromConfig(cfg), ELB: elb.NewFromConfig(cfg), R53: route53.NewFromConfig(cfg), Master: name + "-master", EndpointMode: o.EndpointMode}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("moto setup: %s: %v", what, err)
		}
	}
	clusterTag := ec2types.Tag{Key: aws.String(awsp.TagCluster), Value: aws.String(name)}
	vpc, err := c.EC2.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.0.0.0/16")})
	must(err, "CreateVpc")
	c.VPC = aws.ToString(vpc.Vpc.VpcId)
	sn, err := c.EC2.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: aws.String(c.VPC), CidrBlock: aws.String("10.0.1.0/24"), AvailabilityZone: aws.String(Region + "a")})
	must(err, "CreateSubnet")
	c.Subnet = aws.ToString(sn.Subnet.SubnetId)
	snB, err := c.EC2.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: aws.String(c.VPC), CidrBlock: aws.String("10.0.2.0/24"), AvailabilityZone: aws.String(ZoneB)})
	must(err, "CreateSubnet "+ZoneB)
	c.SubnetB, c.ZoneB = aws.ToString(snB.Subnet.SubnetId), ZoneB
	sg, err := c.EC2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name + "-master"), Description: aws.String("masters"), VpcId: aws.String(c.VPC)})
	must(err, "CreateSecurityGroup")
	c.SecurityGroup = aws.ToString(sg.GroupId)
	// What an NLB in front of instance targets needs (see the provider's
	// secgroups.go): the apiserver port open to clients, which covers the
	// health checks from the VPC.
	_, err = c.EC2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: sg.GroupId, IpPermissions: []ec2types.IpPermission{APIServerIngress("0.0.0.0/0")}})
	must(err, "AuthorizeSecurityGroupIngress")
	_, err = c.EC2.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{KeyName: aws.String("kube-" + name)})
	must(err, "CreateKeyPair")
	imgs, err := c.EC2.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	must(err, "DescribeImages")
	if len(imgs.Images) == 0 {
		t.Fatal("moto has no AMI")
	}
	ami := aws.ToString(imgs.Images[0].ImageId)
	eip, err := c.EC2.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc, TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: []ec2types.Tag{clusterTag}}}})
	must(err, "AllocateAddress")
	c.EIPAllocation, c.EIPPublicIP = aws.ToString(eip.AllocationId), aws.ToString(eip.PublicIp)
	hz, err := c.R53.CreateHostedZone(ctx, &route53.CreateHostedZoneInput{Name: aws.String(name + ".example.test"), CallerReference: aws.String(name + strconv.FormatInt(time.Now().UnixNano(), 36))})
	must(err, "CreateHostedZone")
	c.ZoneID = aws.ToString(hz.HostedZone.Id)

	c.Net, c.NetB, c.NetLB = localtest.AllocSubnet(t), localtest.AllocSubnet(t), localtest.AllocSubnet(t)
	c.StaticIP = fmt.Sprintf("127.0.%d.1", c.Net)
	addrMap := fmt.Sprintf("10.0.1.0/24=127.0.%d.0/24,10.0.2.0/24=127.0.%d.0/24,%s0/24=127.0.%d.0/24,%s/32=%s/32", c.Net, c.NetB, AssignedNet, c.NetLB, c.EIPPublicIP, c.StaticIP)
	stateDir := t.TempDir()
	c.Settings = providers.Settings{Cluster: name, StateDir: stateDir, Options: map[string]string{
		awsp.OptRegion:              Region,
		awsp.OptEndpoint:            px.URL,
		awsp.OptAddressMap:          addrMap,
		awsp.OptPollInterval:        "50ms",
		awsp.OptMaxAttempts:         "10",
		awsp.OptMaxBackoff:          "100ms",
		awsp.OptDeregistrationDelay: "120s", // scaled by the proxy
		awsp.OptHostedZoneID:        c.ZoneID,
		awsp.OptEndpointMode:        o.EndpointMode,
	}}
	pki := filepath.Join(stateDir, name, "pki")
	ca, _, err := certs.LoadOrCreateCA(pki, name+"-ca", certs.ECDSA)
	must(err, "cluster CA")
	c.CA = ca

	// Master 0, as kube-up would have made it.
	const masterIP = "10.0.1.10"
	netIP := fmt.Sprintf("127.0.%d.10", c.Net)
	files, err := providers.ReplicaFiles(ca, c.Master, netIP, certs.APIServerSANs{StaticIP: c.StaticIP})
	must(err, "master certificates")
	tmpl := providers.Template{Version: o.Version, Files: files, Env: map[string]string{
		providers.EnvInitialEtcdCluster:      c.Master + "=" + providers.PeerURL(netIP),
		providers.EnvEtcdInitialClusterState: "new",
		"ETCD_UNSAFE_NO_FSYNC":               "true",
	}}
	ud, err := awsp.EncodeUserData(tmpl)
	must(err, "user data")
	if o.MasterUserData != nil {
		ud = o.MasterUserData
	}
	// Everything a real master's launch may have, so that the clone can be
	// compared with it field by field (clone_test.go): kube-up's tags
	// (cluster/aws/util.sh add-tag / create-master: KubernetesCluster,
	// Role), an instance profile, IMDSv2 required with hop limit 2,
	// EBS-optimized, a placement group and tenancy, unlimited CPU credits,
	// an encrypted gp3 root volume with its own IOPS and throughput, an
	// encrypted io2 data volume with a KMS key, and the source/destination
	// check off (util.sh turns it off on the master).
	kubeTags := []ec2types.Tag{{Key: aws.String("KubernetesCluster"), Value: aws.String(name)}, {Key: aws.String("kubernetes.io/cluster/" + name), Value: aws.String("owned")}}
	must(createInstanceProfile(ctx, m.URL, InstanceProfile), "CreateInstanceProfile")
	// (moto has no CreatePlacementGroup and takes any group name.)
	vol, err := c.EC2.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(Zone), Size: aws.Int32(20), VolumeType: ec2types.VolumeTypeIo2, Iops: aws.Int32(3000),
		Encrypted: aws.Bool(true), KmsKeyId: aws.String(KMSKey),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeVolume, Tags: append([]ec2types.Tag{clusterTag,
			{Key: aws.String(awsp.TagName), Value: aws.String(c.Master + "-pd")},
			{Key: aws.String(awsp.TagReplica), Value: aws.String(c.Master)},
			{Key: aws.String(awsp.TagRole), Value: aws.String("data")}}, kubeTags...)}}})
	must(err, "CreateVolume")
	// Through the proxy: it keeps what moto drops (CPU credits, the root
	// mapping's IOPS and throughput).
	viaProxy := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(px.URL) })
	run, err := viaProxy.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(ami), InstanceType: ec2types.InstanceTypeT3Medium, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		NetworkInterfaces: []ec2types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(c.Subnet), PrivateIpAddress: aws.String(masterIP), Groups: []string{c.SecurityGroup}, DeleteOnTermination: aws.Bool(true)}},
		KeyName:           aws.String("kube-" + name), UserData: aws.String(base64.StdEncoding.EncodeToString(ud)),
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: append([]ec2types.Tag{clusterTag, {Key: aws.String(awsp.TagName), Value: aws.String(c.Master)}, {Key: aws.String("Role"), Value: aws.String(name + "-master")}}, kubeTags...)},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: kubeTags},
		},
		IamInstanceProfile:  &ec2types.IamInstanceProfileSpecification{Arn: aws.String(InstanceProfileARN)},
		MetadataOptions:     &ec2types.InstanceMetadataOptionsRequest{HttpTokens: ec2types.HttpTokensStateRequired, HttpPutResponseHopLimit: aws.Int32(2), HttpEndpoint: ec2types.InstanceMetadataEndpointStateEnabled},
		EbsOptimized:        aws.Bool(true),
		Placement:           &ec2types.Placement{AvailabilityZone: aws.String(Zone), GroupName: aws.String(name + "-masters"), Tenancy: ec2types.TenancyDefault},
		CreditSpecification: &ec2types.CreditSpecificationRequest{CpuCredits: aws.String("unlimited")},
		BlockDeviceMappings: []ec2types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{VolumeSize: aws.Int32(32), VolumeType: ec2types.VolumeTypeGp3,
			Iops: aws.Int32(4000), Throughput: aws.Int32(250), Encrypted: aws.Bool(true), KmsKeyId: aws.String(KMSKey), DeleteOnTermination: aws.Bool(true)}}},
	})
	must(err, "RunInstances")
	_, err = c.EC2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: run.Instances[0].InstanceId, SourceDestCheck: &ec2types.AttributeBooleanValue{Value: aws.Bool(false)}})
	must(err, "ModifyInstanceAttribute SourceDestCheck")
	id := run.Instances[0].InstanceId
	_, err = c.EC2.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: vol.VolumeId, InstanceId: id, Device: aws.String("/dev/xvdb")})
	must(err, "AttachVolume")
	_, err = c.EC2.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: eip.AllocationId, InstanceId: id})
	must(err, "AssociateAddress")

	vms := &VMs{cluster: name, root: t.TempDir(), bin: localtest.NodeBinary(t), caFile: filepath.Join(pki, "ca.crt"), toNet: func(ip string) string {
		switch {
		case ip == c.EIPPublicIP:
			return c.StaticIP
		case len(ip) > 7 && ip[:7] == "10.0.1.":
			return fmt.Sprintf("127.0.%d.%s", c.Net, ip[7:])
		case len(ip) > 7 && ip[:7] == "10.0.2.":
			return fmt.Sprintf("127.0.%d.%s", c.NetB, ip[7:])
		case strings.HasPrefix(ip, AssignedNet):
			return fmt.Sprintf("127.0.%d.%s", c.NetLB, strings.TrimPrefix(ip, AssignedNet))
		}
		return "0.0.0.0" // never dial what is not mapped
	}, ec2: c.EC2, elb: c.ELB, proxy: px, nodes: map[string]*proc{}, zones: map[string]string{}, unbootable: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	px.SetHealth(vms.Health, vms.Zone)
	vms.start()
	t.Cleanup(vms.Close)
	c.VMs = vms

	p, err := awsp.New(ctx, c.Settings)
	must(err, "open provider")
	c.Provider = p
	if o.MasterUserData == nil {
		c.WaitReady(t, ctx, c.Master)
	}
	return c
}

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

// APIServerIngress is the ingress rule tcp/6443 from cidr.
func APIServerIngress(cidr string) ec2types.IpPermission {
	return ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(providers.APIServerPort), ToPort: aws.Int32(providers.APIServerPort), IpRanges: []ec2types.IpRange{{CidrIp: aws.String(cidr)}}}
}

// WaitReady waits until the named replica's node reports ready.
func (c *Cluster) WaitReady(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, ok := c.VMs.NodeStatus(name); ok && st.Ready {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not ready: %v (vms: %v)", name, ctx.Err(), c.VMs.LastError())
		case <-tick.C:
		}
	}
}
