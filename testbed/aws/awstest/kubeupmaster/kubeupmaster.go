// Package kubeupmaster creates a kube-up AWS master 0 through the EC2 API
// exactly as kube-up's AWS scripts create one (kubernetes
// cluster/aws/util.sh, up to v1.8), never through the provider under
// test:
//
//   - kube-up: the master security group kubernetes-master-<CLUSTER_ID>
//     (create-security-group, tagged KubernetesCluster) with its rules:
//     all traffic from itself, tcp/22 from SSH_CIDR, tcp/443 from
//     HTTP_API_CIDR (authorize-security-group-ingress);
//   - start-master → ensure-master-pd: the data volume <MASTER_NAME>-pd
//     (MASTER_DISK_TYPE gp2, MASTER_DISK_SIZE 20 GB) in the zone, tagged
//     Name and KubernetesCluster;
//   - ensure-master-ip: an Elastic IP (allocate-address --domain vpc, or
//     MASTER_RESERVED_IP), its address tagged on the volume as
//     kubernetes.io/master-ip (Elastic IPs took no tags then);
//   - create-certs and write-master-env: the kube-env (kubeuptest:
//     real key names, real CA material; on AWS one kube_env.yaml also
//     holds the ETCD_APISERVER_* keys), INITIAL_ETCD_CLUSTER the master's
//     EC2 hostname;
//   - the user data start-master writes: `#! /bin/bash`, the
//     kube_env.yaml heredoc with AUTO_UPGRADE, DOCKER_STORAGE and
//     API_SERVERS appended (and MASTER_EIP, as setup-kubemark-master-env
//     writes it), the bootstrap download, rc.local; gzip-compressed;
//   - run-instances with the master instance profile, the subnet,
//     --private-ip-address MASTER_INTERNAL_IP (<subnet>.9), the key pair,
//     the security group, --associate-public-ip-address and the root
//     block device mapping (detect-root-device: DeleteOnTermination,
//     MASTER_ROOT_DISK_SIZE, MASTER_ROOT_DISK_TYPE); then add-tag Name
//     <MASTER_NAME>, Role <MASTER_TAG> and KubernetesCluster;
//   - once running: attach-ip-to-instance (the Elastic IP) and
//     attach-volume --device /dev/sdb.
//
// HamasterTags adds what the provider needs today to find a cluster it
// has not adopted (hamaster.io/cluster on the instance, the volume and
// the Elastic IP; hamaster.io/replica and hamaster.io/role=data on the
// volume).
package kubeupmaster

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// Options describe the cluster kube-up makes.
type Options struct {
	// EC2 is the API kube-up's `aws ec2` calls go to.
	EC2 *ec2.Client
	// ClusterID is CLUSTER_ID (and INSTANCE_PREFIX): MASTER_NAME is
	// <ClusterID>-master, MASTER_TAG the same.
	ClusterID string
	VPCID     string
	// SubnetID, SubnetCIDR and Zone are the master's subnet
	// (MASTER_INTERNAL_IP is SubnetCIDR's .9).
	SubnetID, SubnetCIDR, Zone string
	ImageID                    string
	// KeyName is the imported key pair (ssh-key-setup's
	// kubernetes-<fingerprint>).
	KeyName string
	// InstanceProfileARN is IAM_PROFILE_MASTER's ARN ("" for none).
	InstanceProfileARN string
	// ReservedIP is MASTER_RESERVED_IP: the Elastic IP's address.
	ReservedIP string
	// HamasterTags adds the tags the provider looks for before it adopts
	// a cluster.
	HamasterTags bool
	// Customize, when set, changes kube-up's calls before they are made:
	// what an operator added to kube-up's master by hand or with a
	// patched script (IMDSv2, encrypted volumes, a placement group…).
	Customize func(run *ec2.RunInstancesInput, vol *ec2.CreateVolumeInput)
	// Upload stores a tarball where the masters download it from (kube-up
	// uploads before it starts the master); nil skips it.
	Upload func(url string, data []byte) error
}

// Master is the created master 0.
type Master struct {
	ID, Name, Tag             string
	InternalIP, Hostname      string
	EIP, AllocationID         string
	VolumeID, SecurityGroupID string
	UserData                  []byte // gzip'ed, as passed to run-instances
	Metadata                  *kubeuptest.Master
	// Uploads are the tarballs upload-server-tars put in the staging
	// bucket, by URL (kube-env's SERVER_BINARY_TAR_URL and
	// KUBE_MANIFESTS_TAR_URL): the VPC must serve them (VPCPlane.Publish)
	// for the master to boot.
	Uploads map[string][]byte
}

// stagingBase is where kube-up's AWS upload-server-tars puts a devel
// build (cluster/aws/util.sh: s3_url_base https://s3.amazonaws.com for a
// us-east-1 bucket, AWS_S3_BUCKET kubernetes-staging-<hash>,
// staging_path devel), as the bootstrap script's URL below.
const stagingBase = "https://s3.amazonaws.com/kubernetes-staging-0123456789abcdef/devel/"

// kube-up's AWS defaults (cluster/aws/config-default.sh).
const (
	masterSize         = ec2types.InstanceTypeM3Medium
	masterDiskType     = ec2types.VolumeTypeGp2
	masterDiskSize     = 20
	masterRootDiskType = ec2types.VolumeTypeGp2
	masterRootDiskSize = 32
	dockerStorage      = "aufs"
	masterIPSuffix     = ".9" // util.sh MASTER_IP_SUFFIX
)

// Hamaster's tags (providers/aws: TagCluster, TagReplica, TagRole).
const (
	tagCluster = "hamaster.io/cluster"
	tagReplica = "hamaster.io/replica"
	tagRole    = "hamaster.io/role"
)

// Create makes master 0 and returns once EC2 has it running with its
// Elastic IP and data volume attached (it does not wait for its boot).
func Create(ctx context.Context, o Options) (*Master, error) {
	name := o.ClusterID + "-master"
	pfx, err := netip.ParsePrefix(o.SubnetCIDR)
	if err != nil {
		return nil, fmt.Errorf("subnet CIDR %q: %w", o.SubnetCIDR, err)
	}
	// MASTER_INTERNAL_IP="${SUBNET_CIDR%.*}${MASTER_IP_SUFFIX}"
	base := pfx.Masked().Addr().String()
	internal := base[:strings.LastIndex(base, ".")] + masterIPSuffix
	host := "ip-" + strings.ReplaceAll(internal, ".", "-")
	m := &Master{Name: name, Tag: name, InternalIP: internal, Hostname: host}
	kc := tag("KubernetesCluster", o.ClusterID)
	ec := o.EC2

	// kube-up: the master security group and its rules.
	sgID, err := EnsureSecurityGroup(ctx, ec, &ec2.CreateSecurityGroupInput{GroupName: aws.String("kubernetes-master-" + o.ClusterID),
		Description: aws.String("Kubernetes security group applied to master nodes"), VpcId: aws.String(o.VPCID),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: []ec2types.Tag{kc}}}})
	if err != nil {
		return nil, err
	}
	m.SecurityGroupID = sgID
	tcp := func(port int32) ec2types.IpPermission {
		return ec2types.IpPermission{IpProtocol: aws.String("tcp"), FromPort: aws.Int32(port), ToPort: aws.Int32(port), IpRanges: []ec2types.IpRange{{CidrIp: aws.String("0.0.0.0/0")}}}
	}
	if err := AuthorizeIngress(ctx, ec, sgID, []ec2types.IpPermission{
		{IpProtocol: aws.String("-1"), UserIdGroupPairs: []ec2types.UserIdGroupPair{{GroupId: aws.String(sgID)}}}, // masters can talk to masters
		tcp(22),  // SSH_CIDR
		tcp(443), // HTTP_API_CIDR
	}); err != nil {
		return nil, fmt.Errorf("authorize-security-group-ingress: %w", err)
	}

	// ensure-master-pd.
	volTags := []ec2types.Tag{tag("Name", name+"-pd"), kc}
	if o.HamasterTags {
		volTags = append(volTags, tag(tagCluster, o.ClusterID), tag(tagReplica, name), tag(tagRole, "data"))
	}
	cv := &ec2.CreateVolumeInput{AvailabilityZone: aws.String(o.Zone), VolumeType: masterDiskType, Size: aws.Int32(masterDiskSize),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeVolume, Tags: volTags}}}
	if o.Customize != nil {
		o.Customize(nil, cv)
	}
	if m.VolumeID, err = ensureMasterPD(ctx, ec, o.ClusterID, name+"-pd", cv); err != nil {
		return nil, fmt.Errorf("ensure-master-pd: %w", err)
	}

	// ensure-master-ip.
	in := &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc}
	if o.ReservedIP != "" {
		in.Address = aws.String(o.ReservedIP)
	}
	if o.HamasterTags {
		in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: []ec2types.Tag{tag(tagCluster, o.ClusterID)}}}
	}
	eip, err := ec.AllocateAddress(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("ensure-master-ip: %w", err)
	}
	m.EIP, m.AllocationID = aws.ToString(eip.PublicIp), aws.ToString(eip.AllocationId)
	if _, err := ec.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{m.VolumeID}, Tags: []ec2types.Tag{tag("kubernetes.io/master-ip", m.EIP)}}); err != nil {
		return nil, fmt.Errorf("ensure-master-ip: tag the master pd: %w", err)
	}

	// create-certs, write-master-env, the user data.
	md, err := kubeuptest.NewMaster(kubeuptest.Options{InstancePrefix: o.ClusterID, Project: "aws", Zone: o.Zone, StaticIP: m.EIP, SeparateEtcdAPIServerCA: true, Hostname: host})
	if err != nil {
		return nil, err
	}
	// upload-server-tars: the devel build's tarballs in the staging
	// bucket, kube-env naming them there.
	m.Uploads = map[string][]byte{}
	for key, tar := range map[string][]byte{kubeenv.ServerBinaryTarURL: md.ServerTar, kubeenv.KubeManifestsTarURL: md.ManifestsTar} {
		env, err := kubeenv.Parse(md.KubeEnv)
		if err != nil {
			return nil, err
		}
		old := env[key]
		u := stagingBase + old[strings.LastIndex(old, "/")+1:]
		md.KubeEnv = strings.ReplaceAll(md.KubeEnv, "'"+old+"'", "'"+u+"'")
		m.Uploads[u] = tar
		if o.Upload != nil {
			if err := o.Upload(u, tar); err != nil {
				return nil, fmt.Errorf("upload-server-tars %s: %w", u, err)
			}
		}
	}
	m.Metadata = md
	if m.UserData, err = UserData(md, internal, m.EIP); err != nil {
		return nil, err
	}

	// run-instances, add-tag.
	ri := &ec2.RunInstancesInput{
		ImageId: aws.String(o.ImageID), InstanceType: masterSize, MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		KeyName: aws.String(o.KeyName),
		NetworkInterfaces: []ec2types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(o.SubnetID),
			PrivateIpAddress: aws.String(internal), Groups: []string{m.SecurityGroupID}, AssociatePublicIpAddress: aws.Bool(true), DeleteOnTermination: aws.Bool(true)}},
		BlockDeviceMappings: []ec2types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{
			DeleteOnTermination: aws.Bool(true), VolumeSize: aws.Int32(masterRootDiskSize), VolumeType: masterRootDiskType}}},
		UserData: aws.String(base64.StdEncoding.EncodeToString(m.UserData)),
	}
	if o.InstanceProfileARN != "" {
		ri.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Arn: aws.String(o.InstanceProfileARN)}
	}
	if o.Customize != nil {
		o.Customize(ri, nil)
	}
	run, err := ec.RunInstances(ctx, ri)
	if err != nil {
		return nil, fmt.Errorf("run-instances: %w", err)
	}
	m.ID = aws.ToString(run.Instances[0].InstanceId)
	tags := []ec2types.Tag{tag("Name", name), tag("Role", m.Tag), kc}
	if o.HamasterTags {
		tags = append(tags, tag(tagCluster, o.ClusterID))
	}
	if err := retry(ctx, func() error {
		_, err := ec.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{m.ID}, Tags: tags})
		return err
	}); err != nil {
		return nil, fmt.Errorf("add-tag %s: %w", m.ID, err)
	}
	// wait-for-instance-state running, attach-ip-to-instance, attach-volume.
	if err := retry(ctx, func() error {
		out, err := ec.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{m.ID}})
		if err != nil {
			return err
		}
		if len(out.Reservations) == 0 || out.Reservations[0].Instances[0].State.Name != ec2types.InstanceStateNameRunning {
			return fmt.Errorf("instance %s not running yet", m.ID)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if _, err := ec.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: aws.String(m.AllocationID), InstanceId: aws.String(m.ID)}); err != nil {
		return nil, fmt.Errorf("attach-ip-to-instance: %w", err)
	}
	if _, err := ec.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(m.VolumeID), InstanceId: aws.String(m.ID), Device: aws.String("/dev/sdb")}); err != nil {
		return nil, fmt.Errorf("attach-volume: %w", err)
	}
	return m, nil
}

// UserData is start-master's master-user-data for md, gzip-compressed:
// the kube-env (AWS: kube-master-certs' keys in it too) in the
// kube_env.yaml heredoc, then the lines start-master appends.
func UserData(md *kubeuptest.Master, internalIP, eip string) ([]byte, error) {
	var lines []string
	for _, l := range strings.Split(md.KubeEnv+"\n"+md.MasterCerts, "\n") {
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	env := strings.Join(lines, "\n")
	if _, err := kubeenv.Parse(env); err != nil {
		return nil, fmt.Errorf("write-master-env: %w", err)
	}
	var s strings.Builder
	for _, l := range []string{
		"#! /bin/bash",
		"mkdir -p /var/cache/kubernetes-install",
		"cd /var/cache/kubernetes-install",
		"cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML",
		env,
		"AUTO_UPGRADE: 'true'",
		"DOCKER_STORAGE: '" + dockerStorage + "'",
		"API_SERVERS: '" + internalIP + "'",
		"MASTER_EIP: '" + eip + "'",
		"__EOF_MASTER_KUBE_ENV_YAML",
		"",
		"wget -O bootstrap https://s3.amazonaws.com/kubernetes-staging-0123456789abcdef/devel/bootstrap-script",
		"chmod +x bootstrap",
		"mkdir -p /etc/kubernetes",
		"mv kube_env.yaml /etc/kubernetes",
		"mv bootstrap /etc/kubernetes/",
		"cat > /etc/rc.local << EOF_RC_LOCAL",
		"#!/bin/sh -e",
		"/etc/kubernetes/bootstrap",
		"exit 0",
		"EOF_RC_LOCAL",
		"/etc/kubernetes/bootstrap",
	} {
		s.WriteString(l)
		s.WriteByte('\n')
	}
	// `gzip master-user-data`: cloud-init accepts compressed data.
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s.String())); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

var notFoundRE = regexp.MustCompile(`NotFound|not running yet`)

// retry is add-tag's and wait-for-instance-state's loop: a resource just
// created may not be visible yet.
func retry(ctx context.Context, f func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil || !notFoundRE.MatchString(err.Error()) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func tag(k, v string) ec2types.Tag { return ec2types.Tag{Key: aws.String(k), Value: aws.String(v)} }

// ensureMasterPD is kube-up's ensure-master-pd: find-master-pd (a volume
// tagged Name=<master>-pd in the cluster), and create-volume only when
// there is none. CreateVolume without a ClientToken is not idempotent: an
// SDK retry of a create moto had done before answering 500 made a second
// master disk, left "available" and tagged for master 0 (seen in
// TestAddRemove1to3to1 at load 20); ensure tries each create once.
func ensureMasterPD(ctx context.Context, ec *ec2.Client, cluster, name string, cv *ec2.CreateVolumeInput) (string, error) {
	return ensure(ctx, "master PD "+name, func(ctx context.Context) (string, error) {
		out, err := ec.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{
			filter("tag:Name", name), filter("tag:KubernetesCluster", cluster)}})
		if err != nil || len(out.Volumes) == 0 {
			return "", err
		}
		return aws.ToString(out.Volumes[0].VolumeId), nil
	}, func(ctx context.Context, once func(*ec2.Options)) (string, error) {
		vol, err := ec.CreateVolume(ctx, cv, once)
		if err != nil {
			return "", err
		}
		return aws.ToString(vol.VolumeId), nil
	})
}
