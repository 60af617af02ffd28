package aws

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
)

// The clone copies everything a master's launch had, except what must
// differ (name, private address, zone and the zone's subnet, the data
// volume itself): these Template.Machine keys hold what instances.go's
// basic keys do not. JSON values are encoded from fixed structs, so the
// same master always yields the same string (the launch hash depends on
// it).
const (
	// MachineMetadataOptions: IMDS settings (IMDSv2 required, hop limit,
	// endpoint, IPv6, tags in metadata), JSON.
	MachineMetadataOptions = "metadata-options"
	// MachineTags: the instance's own tags except Name, hamaster's and
	// aws:* (reserved), JSON object. kube-up's KubernetesCluster, Role and
	// kubernetes.io/cluster/<id> tags are among them.
	MachineTags = "tags"
	// MachineRootVolume: the root EBS volume (device, size, type, IOPS,
	// throughput, encryption, KMS key, delete-on-termination, tags), JSON.
	MachineRootVolume = "root-volume"
	// MachineDataVolume: the data volume's IOPS, throughput, encryption,
	// KMS key and tags (size, type and device have their own keys), JSON.
	MachineDataVolume = "data-volume"
	// MachineEBSOptimized: "true" or "false".
	MachineEBSOptimized = "ebs-optimized"
	// MachinePlacement: tenancy and placement group, JSON (the zone is the
	// replica's own).
	MachinePlacement = "placement"
	// MachineCPUCredits: "standard" or "unlimited" (burstable types only).
	MachineCPUCredits = "cpu-credits"
	// MachineSourceDestCheck: "false" when the master routes for pods
	// (kube-up's util.sh turns it off on the master: modify-instance-attribute
	// --source-dest-check).
	MachineSourceDestCheck = "source-dest-check"
	// MachinePublicIP: "true" when the master has a public address (kube-up
	// launches its master with --associate-public-ip-address: util.sh
	// start-master), so a clone gets one too and is reachable over SSH
	// without a bastion. A master whose only public address was the
	// Elastic IP handed to the NLB records none.
	MachinePublicIP = "public-ip"
)

type metadataSpec struct {
	HTTPTokens   string `json:"http_tokens,omitempty"`
	HopLimit     int32  `json:"hop_limit,omitempty"`
	HTTPEndpoint string `json:"http_endpoint,omitempty"`
	HTTPIPv6     string `json:"http_protocol_ipv6,omitempty"`
	Tags         string `json:"instance_metadata_tags,omitempty"`
}

// volumeSpec is an EBS volume's settings that a clone copies.
type volumeSpec struct {
	Device              string            `json:"device,omitempty"`
	Size                int32             `json:"size,omitempty"`
	Type                string            `json:"type,omitempty"`
	IOPS                int32             `json:"iops,omitempty"`
	Throughput          int32             `json:"throughput,omitempty"`
	Encrypted           bool              `json:"encrypted,omitempty"`
	KMSKeyID            string            `json:"kms_key_id,omitempty"`
	DeleteOnTermination *bool             `json:"delete_on_termination,omitempty"`
	Tags                map[string]string `json:"tags,omitempty"`
}

type placementSpec struct {
	Tenancy   string `json:"tenancy,omitempty"`
	GroupName string `json:"group_name,omitempty"`
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // fixed structs and string maps always encode
	}
	if string(b) == "{}" || string(b) == "null" {
		return ""
	}
	return string(b)
}

func decodeJSON(m map[string]string, key string, v any) error {
	s := m[key]
	if s == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "template machine setting %q: %w", key, err)
	}
	return nil
}

// copiedTags are the tags a clone copies: not Name (the replica's own),
// not hamaster's (set by the provider), not aws:* (reserved by AWS).
func copiedTags(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		k := aws.ToString(t.Key)
		if k == TagName || strings.HasPrefix(k, "hamaster.io/") || strings.HasPrefix(k, "aws:") {
			continue
		}
		m[k] = aws.ToString(t.Value)
	}
	return m
}

func toTags(m map[string]string) []types.Tag {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]types.Tag, 0, len(keys))
	for _, k := range keys {
		out = append(out, types.Tag{Key: aws.String(k), Value: aws.String(m[k])})
	}
	return out
}

// ebsSettable: IOPS can be set on io1, io2 and gp3; throughput on gp3.
func ebsSettable(vtype string) (iops, throughput bool) {
	switch vtype {
	case "io1", "io2":
		return true, false
	case "gp3":
		return true, true
	}
	return false, false
}

func specOf(v types.Volume) volumeSpec {
	s := volumeSpec{Size: aws.ToInt32(v.Size), Type: string(v.VolumeType), Encrypted: aws.ToBool(v.Encrypted), KMSKeyID: aws.ToString(v.KmsKeyId)}
	if iops, tp := ebsSettable(s.Type); iops {
		s.IOPS = aws.ToInt32(v.Iops)
		if tp {
			s.Throughput = aws.ToInt32(v.Throughput)
		}
	}
	if t := copiedTags(v.Tags); len(t) > 0 {
		s.Tags = t
	}
	return s
}

// rootDevice is the instance's root block device mapping: the one on
// RootDeviceName, else the only one that is not the data volume (moto
// reports the AMI's root device name, not the launch's).
func rootDevice(i types.Instance, dataVolumeID string) (types.InstanceBlockDeviceMapping, bool) {
	var others []types.InstanceBlockDeviceMapping
	for _, m := range i.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == aws.ToString(i.RootDeviceName) {
			return m, true
		}
		if m.Ebs != nil && aws.ToString(m.Ebs.VolumeId) != dataVolumeID {
			others = append(others, m)
		}
	}
	if len(others) == 1 {
		return others[0], true
	}
	return types.InstanceBlockDeviceMapping{}, false
}

// cloneSettings reads what a clone copies beyond instances.go's basic keys
// into m. dataVolume is the replica's data volume as EC2 reports it (nil:
// none).
func (in *instances) cloneSettings(ctx context.Context, raw types.Instance, dataVolumeID string, m map[string]string) error {
	if o := raw.MetadataOptions; o != nil {
		m[MachineMetadataOptions] = encodeJSON(metadataSpec{HTTPTokens: string(o.HttpTokens), HopLimit: aws.ToInt32(o.HttpPutResponseHopLimit),
			HTTPEndpoint: string(o.HttpEndpoint), HTTPIPv6: string(o.HttpProtocolIpv6), Tags: string(o.InstanceMetadataTags)})
	}
	m[MachineTags] = encodeJSON(copiedTags(raw.Tags))
	m[MachineEBSOptimized] = strconv.FormatBool(aws.ToBool(raw.EbsOptimized))
	if pl := raw.Placement; pl != nil {
		m[MachinePlacement] = encodeJSON(placementSpec{Tenancy: string(pl.Tenancy), GroupName: aws.ToString(pl.GroupName)})
	}
	if raw.SourceDestCheck != nil && !aws.ToBool(raw.SourceDestCheck) {
		m[MachineSourceDestCheck] = "false"
	}
	if aws.ToString(raw.PublicIpAddress) != "" {
		m[MachinePublicIP] = "true"
	}
	ids := []string{}
	root, hasRoot := rootDevice(raw, dataVolumeID)
	if hasRoot && root.Ebs != nil {
		ids = append(ids, aws.ToString(root.Ebs.VolumeId))
	}
	if dataVolumeID != "" {
		ids = append(ids, dataVolumeID)
	}
	if len(ids) > 0 {
		out, err := in.p.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: ids})
		if err != nil {
			return mapErr(err, "describe the volumes of %s", aws.ToString(raw.InstanceId))
		}
		for _, v := range out.Volumes {
			s := specOf(v)
			switch aws.ToString(v.VolumeId) {
			case dataVolumeID:
				s.Size, s.Type = 0, "" // kept under their own keys
				m[MachineDataVolume] = encodeJSON(s)
			default:
				s.Device = aws.ToString(root.DeviceName)
				s.DeleteOnTermination = root.Ebs.DeleteOnTermination
				m[MachineRootVolume] = encodeJSON(s)
			}
		}
	}
	if strings.HasPrefix(string(raw.InstanceType), "t") {
		out, err := in.p.ec2.DescribeInstanceCreditSpecifications(ctx, &ec2.DescribeInstanceCreditSpecificationsInput{InstanceIds: []string{aws.ToString(raw.InstanceId)}})
		if err != nil {
			return mapErr(err, "describe the CPU credits of %s", aws.ToString(raw.InstanceId))
		}
		for _, c := range out.InstanceCreditSpecifications {
			m[MachineCPUCredits] = aws.ToString(c.CpuCredits)
		}
	}
	return nil
}

// applyClone puts the cloned settings into a launch. Tags the provider
// sets (Name, cluster) win over copied ones.
func applyClone(input *ec2.RunInstancesInput, m map[string]string, zone string, own []types.Tag) error {
	var md metadataSpec
	if err := decodeJSON(m, MachineMetadataOptions, &md); err != nil {
		return err
	}
	if md != (metadataSpec{}) {
		input.MetadataOptions = &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensState(md.HTTPTokens), HttpEndpoint: types.InstanceMetadataEndpointState(md.HTTPEndpoint),
			HttpProtocolIpv6: types.InstanceMetadataProtocolState(md.HTTPIPv6), InstanceMetadataTags: types.InstanceMetadataTagsState(md.Tags)}
		if md.HopLimit > 0 {
			input.MetadataOptions.HttpPutResponseHopLimit = aws.Int32(md.HopLimit)
		}
	}
	tags := map[string]string{}
	if err := decodeJSON(m, MachineTags, &tags); err != nil {
		return err
	}
	for _, t := range own {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	input.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: toTags(tags)}}
	if v := m[MachineEBSOptimized]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "template machine setting %q: %q is not true or false", MachineEBSOptimized, v)
		}
		input.EbsOptimized = aws.Bool(b)
	}
	var pl placementSpec
	if err := decodeJSON(m, MachinePlacement, &pl); err != nil {
		return err
	}
	input.Placement = &types.Placement{AvailabilityZone: aws.String(zone), Tenancy: types.Tenancy(pl.Tenancy)}
	if pl.GroupName != "" {
		input.Placement.GroupName = aws.String(pl.GroupName)
	}
	if v := m[MachineCPUCredits]; v != "" {
		input.CreditSpecification = &types.CreditSpecificationRequest{CpuCredits: aws.String(v)}
	}
	var root volumeSpec
	if err := decodeJSON(m, MachineRootVolume, &root); err != nil {
		return err
	}
	if root.Device != "" {
		ebs := &types.EbsBlockDevice{VolumeSize: nonZero(root.Size), VolumeType: types.VolumeType(root.Type), DeleteOnTermination: root.DeleteOnTermination}
		ebs.Iops, ebs.Throughput, ebs.Encrypted, ebs.KmsKeyId = root.ebs(root.Type)
		input.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: aws.String(root.Device), Ebs: ebs}}
		if len(root.Tags) > 0 {
			input.TagSpecifications = append(input.TagSpecifications, types.TagSpecification{ResourceType: types.ResourceTypeVolume, Tags: toTags(root.Tags)})
		}
	}
	return nil
}

// ebs is the cloned volume's settings as a new EBS volume of type vtype
// takes them: IOPS and throughput where that type can set them (none when
// zero), encryption (nil, the account's default, unless the original was
// encrypted) and its KMS key.
func (s volumeSpec) ebs(vtype string) (iops, throughput *int32, encrypted *bool, kmsKeyID *string) {
	canIOPS, canThroughput := ebsSettable(vtype)
	if canIOPS {
		iops = nonZero(s.IOPS)
	}
	if canThroughput {
		throughput = nonZero(s.Throughput)
	}
	if s.Encrypted {
		encrypted = aws.Bool(true)
		if s.KMSKeyID != "" {
			kmsKeyID = aws.String(s.KMSKeyID)
		}
	}
	return iops, throughput, encrypted, kmsKeyID
}

func nonZero(v int32) *int32 {
	if v == 0 {
		return nil
	}
	return aws.Int32(v)
}

// applyDataVolume puts the data volume's cloned settings into its
// CreateVolume; the provider's own tags win.
func applyDataVolume(input *ec2.CreateVolumeInput, m map[string]string) error {
	var s volumeSpec
	if err := decodeJSON(m, MachineDataVolume, &s); err != nil {
		return err
	}
	input.Iops, input.Throughput, input.Encrypted, input.KmsKeyId = s.ebs(string(input.VolumeType))
	if len(s.Tags) > 0 && len(input.TagSpecifications) == 1 {
		tags := map[string]string{}
		for k, v := range s.Tags {
			tags[k] = v
		}
		for _, t := range input.TagSpecifications[0].Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		input.TagSpecifications[0].Tags = toTags(tags)
	}
	return nil
}

// ensureSourceDestCheck turns the source/destination check off on a
// clone of a master that had it off (observe → compare → act).
func (in *instances) ensureSourceDestCheck(ctx context.Context, i types.Instance, m map[string]string) error {
	if m[MachineSourceDestCheck] != "false" || (i.SourceDestCheck != nil && !aws.ToBool(i.SourceDestCheck)) {
		return nil
	}
	if _, err := in.p.ec2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: i.InstanceId, SourceDestCheck: &types.AttributeBooleanValue{Value: aws.Bool(false)}}); err != nil {
		return mapErr(err, "turn the source/destination check off on %s", aws.ToString(i.InstanceId))
	}
	return nil
}
