package awstest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
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
	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/aws/awstest/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
)

// kube-up's AWS network (cluster/aws/util.sh: VPC_CIDR
// ${KUBE_VPC_CIDR_BASE:-172.20}.0.0/16, SUBNET_CIDR .0.0/24; a second
// subnet is KUBE_SUBNET_CIDR's override, here .1.0/24 in zone b).
const (
	KubeUpVPCCIDR     = "172.20.0.0/16"
	KubeUpSubnetCIDR  = "172.20.0.0/24"
	KubeUpSubnetBCIDR = "172.20.1.0/24"
)

// KubeUpOptions for UpKubeUp.
type KubeUpOptions struct {
	// EndpointMode as in Options.
	EndpointMode string
	// Timing scales AWS's NLB timing (zero Scale: DefaultScale).
	Timing Timing
	// BootTimeout bounds master 0's boot (default 90 s).
	BootTimeout time.Duration
	// NoHamasterTags leaves master 0 with kube-up's tags only.
	NoHamasterTags bool
	// NoProvider skips opening the provider.
	NoProvider bool
	// Customize is kubeupmaster.Options.Customize for master 0.
	Customize func(run *ec2.RunInstancesInput, vol *ec2.CreateVolumeInput)
}

// KubeUpCluster is what UpKubeUp made beside Cluster's fields.
type KubeUpCluster struct {
	Net   *vpctest.VPC
	Plane *VPCPlane
	// Releases is the release site new versions come from.
	Releases *ReleaseSite
	Master   *kubeupmaster.Master
	// CAPool holds the cluster CA (CA_CERT), which signed MASTER_CERT
	// (it names kubernetes and the Elastic IP).
	CAPool *x509.CertPool
	// SSHUser, SSHKeyFile and KnownHostsFile reach the instances' sshd;
	// Bastion is the bastion's public address:22.
	SSHUser, SSHKeyFile, KnownHostsFile, Bastion string
}

// UpKubeUp needs root (vpctest.Need). It starts moto behind the proxy, a
// namespace VPC playing the EC2 VPC (VPCPlane), a bastion instance with
// its own Elastic IP, and master 0 created through EC2 as kube-up's
// start-master creates it (kubeupmaster.Create), waits until master 0
// serves /readyz on its Elastic IP, and opens the provider with SSH
// through the bastion: the test process (the operator) is in the root
// namespace and reaches only public addresses.
func UpKubeUp(t *testing.T, name string, o KubeUpOptions) *Cluster {
	t.Helper()
	vpctest.Need(t)
	if o.Timing.Scale <= 0 {
		o.Timing.Scale = DefaultScale
	}
	if o.EndpointMode == "" {
		o.EndpointMode = os.Getenv("HAMASTER_AWS_ENDPOINT_MODE")
	}
	if o.EndpointMode == "" {
		o.EndpointMode = "eip-handover"
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.BootTimeout+2*time.Minute)
	defer cancel()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("kube-up cluster: %s: %v", what, err)
		}
	}
	net := vpctest.NewSubnet(ctx, t, "a", netip.MustParsePrefix(KubeUpVPCCIDR)) // its cleanup runs after the plane's
	m := StartMoto(t)
	px := NewProxy(t, m.URL, o.Timing)
	px.SetAssignedNet(fmt.Sprintf("198.18.%d.", net.Third))
	// EC2's pool of auto-assigned public addresses: .100-.199 of the
	// VPC's external range (Elastic IPs here take .5 and .6, NLBs .10+).
	var pool []string
	for h := 100; h < 200; h++ {
		pool = append(pool, net.External(byte(h)).String())
	}
	px.SetPublicPool(pool)
	cfg := aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", ""), BaseEndpoint: aws.String(m.URL), Retryer: MotoRetryer}
	viaProxy := ec2.NewFromConfig(cfg, func(eo *ec2.Options) { eo.BaseEndpoint = aws.String(px.URL) })
	c := &Cluster{Name: name, Moto: m, Proxy: px, EC2: ec2.NewFromConfig(cfg), ELB: elb.NewFromConfig(cfg), R53: route53.NewFromConfig(cfg),
		Master: name + "-master", EndpointMode: o.EndpointMode, ZoneB: ZoneB}
	kc := ec2types.Tag{Key: aws.String("KubernetesCluster"), Value: aws.String(name)}
	tags := func(rt ec2types.ResourceType, extra ...ec2types.Tag) []ec2types.TagSpecification {
		return []ec2types.TagSpecification{{ResourceType: rt, Tags: append([]ec2types.Tag{kc}, extra...)}}
	}

	// kube-up: vpc-setup, subnet-setup, ssh-key-setup.
	vpcID, err := kubeupmaster.EnsureVPC(ctx, c.EC2, name, "kubernetes-vpc", &ec2.CreateVpcInput{CidrBlock: aws.String(KubeUpVPCCIDR), TagSpecifications: tags(ec2types.ResourceTypeVpc, ec2types.Tag{Key: aws.String("Name"), Value: aws.String("kubernetes-vpc")})})
	must(err, "create-vpc")
	c.VPC = vpcID
	c.Subnet, err = kubeupmaster.EnsureSubnet(ctx, c.EC2, &ec2.CreateSubnetInput{VpcId: aws.String(vpcID), CidrBlock: aws.String(KubeUpSubnetCIDR), AvailabilityZone: aws.String(Zone), TagSpecifications: tags(ec2types.ResourceTypeSubnet)})
	must(err, "create-subnet")
	c.SubnetB, err = kubeupmaster.EnsureSubnet(ctx, c.EC2, &ec2.CreateSubnetInput{VpcId: aws.String(vpcID), CidrBlock: aws.String(KubeUpSubnetBCIDR), AvailabilityZone: aws.String(ZoneB), TagSpecifications: tags(ec2types.ResourceTypeSubnet)})
	must(err, "create-subnet "+ZoneB)
	// EC2's DNS (kube-up's vpc-setup turns on DNS support and hostnames;
	// create-dhcp-option-set uses AmazonProvidedDNS) derives ip-a-b-c-d
	// from the address: every address of the subnets resolves, whether an
	// instance has it yet or not.
	names := map[string]netip.Addr{}
	for _, cidr := range []string{KubeUpSubnetCIDR, KubeUpSubnetBCIDR} {
		p := netip.MustParsePrefix(cidr)
		for a := p.Addr().Next(); p.Contains(a.Next()); a = a.Next() {
			names[awsp.Hostname(a.String())] = a
		}
	}
	must(net.SetStaticHosts(names), "the VPC's DNS names")
	stateDir := t.TempDir()
	keyFile, pub, err := writeSSHKey(filepath.Join(stateDir, "ssh"))
	must(err, "ssh key")
	keyName := "kubernetes-" + name
	must(kubeupmaster.ImportKeyPair(ctx, c.EC2, keyName, []byte(pub)), "import-key-pair")
	imgs, err := c.EC2.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	must(err, "describe-images")
	if len(imgs.Images) == 0 {
		t.Fatal("moto has no AMI")
	}
	ami := aws.ToString(imgs.Images[0].ImageId)
	must(createInstanceProfile(ctx, m.URL, InstanceProfile), "create-instance-profile")

	// The data plane.
	plane := NewVPCPlane(VPCPlaneOptions{Net: net.VPC, VPCID: c.VPC, Cluster: name, Dir: t.TempDir(), NodeBinary: localtest.NodeBinary(t),
		EC2: c.EC2, ELB: c.ELB, Proxy: px})
	t.Cleanup(plane.Close)
	px.SetHealth(plane.Health, plane.Zone)
	px.SetConsole(plane.ConsoleOutput)
	px.SetOnChange(plane.Kick)
	c.VMs = plane
	releases := NewReleaseSite(t, plane)
	for _, v := range DefaultReleases {
		must(releases.Add(v), "publish release "+v)
	}
	k := &KubeUpCluster{Net: net, Plane: plane, Releases: releases, SSHUser: DefaultSSHUser, SSHKeyFile: keyFile, KnownHostsFile: plane.KnownHostsFile()}
	c.KubeUp = k

	// A bastion: the operator's way into the VPC once master 0's Elastic
	// IP is the NLB's.
	bsgID, err := kubeupmaster.EnsureSecurityGroup(ctx, c.EC2, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name + "-bastion"), Description: aws.String("ssh bastion"), VpcId: aws.String(vpcID)})
	must(err, "bastion security group")
	must(kubeupmaster.AuthorizeIngress(ctx, c.EC2, bsgID, []ec2types.IpPermission{
		{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(22), ToPort: aws.Int32(22), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("0.0.0.0/0")}}}}), "bastion ssh rule")
	br, err := c.EC2.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(ami), InstanceType: ec2types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		KeyName: aws.String(keyName), NetworkInterfaces: []ec2types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(c.Subnet),
			PrivateIpAddress: aws.String("172.20.0.5"), Groups: []string{bsgID}}},
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{{Key: aws.String("Name"), Value: aws.String(name + "-bastion")}}}}})
	must(err, "bastion run-instances")
	beip, err := c.EC2.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc, Address: aws.String(net.External(6).String())})
	must(err, "bastion allocate-address")
	_, err = c.EC2.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: beip.AllocationId, InstanceId: br.Instances[0].InstanceId})
	must(err, "bastion associate-address")
	k.Bastion = aws.ToString(beip.PublicIp) + ":22"

	// Master 0, as kube-up's start-master makes it.
	mo, err := kubeupmaster.Create(ctx, kubeupmaster.Options{EC2: viaProxy, ClusterID: name, VPCID: c.VPC, SubnetID: c.Subnet, SubnetCIDR: KubeUpSubnetCIDR, Zone: Zone,
		ImageID: ami, KeyName: keyName, InstanceProfileARN: InstanceProfileARN, ReservedIP: net.External(5).String(), HamasterTags: !o.NoHamasterTags, Customize: o.Customize, Upload: plane.Publish})
	must(err, "start-master")
	k.Master = mo
	k.CAPool = x509.NewCertPool()
	k.CAPool.AddCert(mo.Metadata.ClusterCA.Cert)
	c.EIPAllocation, c.EIPPublicIP, c.StaticIP, c.SecurityGroup = mo.AllocationID, mo.EIP, mo.EIP, mo.SecurityGroupID
	hz, err := c.R53.CreateHostedZone(ctx, &route53.CreateHostedZoneInput{Name: aws.String(name + ".example.test"), CallerReference: aws.String(name + strconv.FormatInt(time.Now().UnixNano(), 36))})
	must(err, "create hosted zone")
	c.ZoneID = aws.ToString(hz.HostedZone.Id)
	c.Settings = providers.Settings{Cluster: name, StateDir: stateDir, Out: io.Discard, Recognize: registry.Recognize, Options: map[string]string{
		awsp.OptRegion:              Region,
		awsp.OptEndpoint:            px.URL,
		awsp.OptPollInterval:        "50ms",
		awsp.OptMaxAttempts:         "10",
		awsp.OptMaxBackoff:          "100ms",
		awsp.OptDeregistrationDelay: "120s", // scaled by the proxy
		awsp.OptHostedZoneID:        c.ZoneID,
		awsp.OptEndpointMode:        o.EndpointMode,
		remote.OptUser:              k.SSHUser,
		remote.OptKey:               k.SSHKeyFile,
		remote.OptKnownHosts:        k.KnownHostsFile,
		awsp.OptSSHBastion:          k.Bastion,
		awsp.OptReleaseURL:          releases.URL(),
	}}
	if err := k.WaitReady(ctx, mo.EIP, o.BootTimeout); err != nil {
		out, _ := plane.ConsoleOutput(mo.ID)
		t.Fatalf("master 0: %v (plane: %v)\nconsole output:\n%s", err, plane.LastError(), out)
	}
	// The bastion's host key is in known_hosts once its sshd runs.
	if err := waitKnown(ctx, k.KnownHostsFile, aws.ToString(beip.PublicIp)); err != nil {
		t.Fatalf("bastion: %v (plane: %v)", err, plane.LastError())
	}
	if o.NoProvider {
		return c
	}
	p, err := awsp.New(ctx, c.Settings)
	must(err, "open provider")
	// The flavor the provider finds (kube-up's) gives it its master format.
	_, err = registry.Open("", p, nil)
	must(err, "open flavor")
	c.Provider = p
	if cl, ok := p.(interface{ Close() error }); ok {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return c
}

// HTTP is a client trusting the cluster CA, verifying "kubernetes" (what
// MASTER_CERT names besides the Elastic IP).
func (k *KubeUpCluster) HTTP() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.CAPool, ServerName: "kubernetes", MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
}

// WaitReady polls https://ip:443/readyz until 200; it gives up at once
// when master 0's boot has exited (its console output says why).
func (k *KubeUpCluster) WaitReady(ctx context.Context, ip string, timeout time.Duration) error {
	return kubeuptest.WaitReady(ctx, k.HTTP(), "https://"+net.JoinHostPort(ip, "443")+"/readyz", timeout, func() string {
		if out, ok := k.Plane.ConsoleOutput(k.Master.ID); ok && strings.Contains(out, "bootstrap exited") {
			return out
		}
		return ""
	})
}

func waitKnown(ctx context.Context, file, host string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(file); err == nil && strings.Contains(string(b), host+" ") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never in %s: %w", host, file, ctx.Err())
		case <-tick.C:
		}
	}
}

// writeSSHKey makes the operator's key (kube-up's AWS_SSH_KEY): the
// private key file and the public key line ImportKeyPair takes.
func writeSSHKey(dir string) (string, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "operator@awstest")
	if err != nil {
		return "", "", err
	}
	keyFile := filepath.Join(dir, "kube_aws_rsa")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", "", err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", "", err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " operator@awstest"
	return keyFile, line, os.WriteFile(keyFile+".pub", []byte(line+"\n"), 0o644)
}
