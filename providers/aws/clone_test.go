package aws_test

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/kubeenv"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
)

// launched is what EC2 reports of one replica's launch: the instance, its
// root and data volumes, its CPU credits.
type launched struct {
	inst       ec2types.Instance
	root, data ec2types.Volume
	credits    string
}

func describeLaunch(ctx context.Context, t *testing.T, c *awstest.Cluster, viaProxy *ec2.Client, name string) launched {
	t.Helper()
	// Through the proxy, which is EC2 for the provider: it answers what moto
	// forgets (placement group, CPU credits).
	out, err := viaProxy.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:Name"), Values: []string{name}}, {Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
	if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("describe %s: %v (%d reservations)", name, err, len(out.Reservations))
	}
	l := launched{inst: out.Reservations[0].Instances[0]}
	var ids []string
	for _, m := range l.inst.BlockDeviceMappings {
		ids = append(ids, aws.ToString(m.Ebs.VolumeId))
	}
	vols, err := c.EC2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: ids})
	if err != nil {
		t.Fatalf("describe volumes of %s: %v", name, err)
	}
	for _, v := range vols.Volumes {
		if tagOf(v.Tags, awsp.TagRole) == "data" {
			l.data = v
		} else {
			l.root = v
		}
	}
	cs, err := viaProxy.DescribeInstanceCreditSpecifications(ctx, &ec2.DescribeInstanceCreditSpecificationsInput{InstanceIds: []string{aws.ToString(l.inst.InstanceId)}})
	if err != nil || len(cs.InstanceCreditSpecifications) != 1 {
		t.Fatalf("credit specification of %s: %v", name, err)
	}
	l.credits = aws.ToString(cs.InstanceCreditSpecifications[0].CpuCredits)
	return l
}

func tagOf(tags []ec2types.Tag, k string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == k {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// tagString renders tags without the ones that must differ (Name) or that
// hamaster sets per replica.
func tagString(tags []ec2types.Tag) string {
	m := map[string]string{}
	for _, t := range tags {
		k := aws.ToString(t.Key)
		if k == awsp.TagName || k == awsp.TagReplica {
			continue
		}
		m[k] = aws.ToString(t.Value)
	}
	keys := slicesSorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s;", k, m[k])
	}
	return b.String()
}

func slicesSorted(seq func(func(string) bool)) []string {
	var out []string
	seq(func(s string) bool { out = append(out, s); return true })
	sort.Strings(out)
	return out
}

func groups(i ec2types.Instance) string {
	var ids []string
	for _, ni := range i.NetworkInterfaces {
		for _, g := range ni.Groups {
			ids = append(ids, aws.ToString(g.GroupId))
		}
	}
	for _, g := range i.SecurityGroups {
		ids = append(ids, aws.ToString(g.GroupId))
	}
	sort.Strings(ids)
	return strings.Join(slicesCompact(ids), ",")
}

func slicesCompact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// TestCloneFieldByField creates a replica in the other zone from master
// 0's template — master 0 having every launch setting a real master may
// have — and compares the clone with the master field by field, as EC2
// reports them: equal where the clone must copy, different (and right)
// where it must differ.
func TestCloneFieldByField(t *testing.T) {
	t.Parallel()
	// Master 0 as kube-up makes it, plus what an operator may have added
	// to its launch: an IMDSv2-only metadata service with hop limit 2,
	// EBS optimization, a placement group and tenancy, unlimited CPU
	// credits, an encrypted gp3 root volume with its own IOPS and
	// throughput, an encrypted io2 data volume with a KMS key, kube-up's
	// cluster tag in the newer form (kubernetes.io/cluster/<name>=owned),
	// and the source/destination check off (util.sh turns it off on the
	// master).
	const cluster = "clone"
	kubeTag := ec2types.Tag{Key: aws.String("kubernetes.io/cluster/" + cluster), Value: aws.String("owned")}
	c := awstest.UpKubeUp(t, cluster, awstest.KubeUpOptions{Customize: func(run *ec2.RunInstancesInput, vol *ec2.CreateVolumeInput) {
		if vol != nil {
			vol.VolumeType, vol.Iops, vol.Encrypted, vol.KmsKeyId = ec2types.VolumeTypeIo2, aws.Int32(3000), aws.Bool(true), aws.String(awstest.KMSKey)
			vol.TagSpecifications[0].Tags = append(vol.TagSpecifications[0].Tags, kubeTag)
		}
		if run != nil {
			run.InstanceType = ec2types.InstanceTypeT3Medium
			run.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{HttpTokens: ec2types.HttpTokensStateRequired, HttpPutResponseHopLimit: aws.Int32(2), HttpEndpoint: ec2types.InstanceMetadataEndpointStateEnabled}
			run.EbsOptimized = aws.Bool(true)
			run.Placement = &ec2types.Placement{AvailabilityZone: aws.String(awstest.Zone), GroupName: aws.String(cluster + "-masters"), Tenancy: ec2types.TenancyDefault}
			run.CreditSpecification = &ec2types.CreditSpecificationRequest{CpuCredits: aws.String("unlimited")}
			run.BlockDeviceMappings = []ec2types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.EbsBlockDevice{VolumeSize: aws.Int32(32), VolumeType: ec2types.VolumeTypeGp3,
				Iops: aws.Int32(4000), Throughput: aws.Int32(250), Encrypted: aws.Bool(true), KmsKeyId: aws.String(awstest.KMSKey), DeleteOnTermination: aws.Bool(true)}}}
			run.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{kubeTag}}, {ResourceType: ec2types.ResourceTypeVolume, Tags: []ec2types.Tag{kubeTag}}}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	if _, err := c.EC2.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: aws.String(c.KubeUp.Master.ID), SourceDestCheck: &ec2types.AttributeBooleanValue{Value: aws.Bool(false)}}); err != nil {
		t.Fatal(err)
	}
	kp, ok := c.Provider.(*awsp.KubeUpProvider)
	if !ok {
		t.Fatalf("provider %T on a kube-up master", c.Provider)
	}
	inst := c.Provider.Instances()
	master, err := inst.Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	const name = "clone-master-b1c"
	addr, err := inst.ReserveAddress(ctx, name, awstest.ZoneB)
	if err != nil {
		t.Fatal(err)
	}
	// A standalone replica (etcd clusters of its own): the launch is what
	// is compared.
	tmpl, err := kubeUpFlavor(t, kp).CloneTemplate(ctx, master.Template, name, addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Env[kubeenv.InitialEtcdClusterState] = kubeenv.StateNew
	if _, err := inst.Create(ctx, name, awstest.ZoneB, tmpl); err != nil {
		t.Fatalf("create the clone: %v", err)
	}
	viaProxy := ec2.NewFromConfig(aws.Config{Region: awstest.Region, Credentials: c.EC2.Options().Credentials, BaseEndpoint: aws.String(c.Proxy.URL)})
	m, k := describeLaunch(ctx, t, c, viaProxy, c.Master), describeLaunch(ctx, t, c, viaProxy, name)

	str := func(p *string) string { return aws.ToString(p) }
	i32 := func(p *int32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	b := func(p *bool) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	md := func(l launched) *ec2types.InstanceMetadataOptionsResponse {
		if l.inst.MetadataOptions == nil {
			return &ec2types.InstanceMetadataOptionsResponse{}
		}
		return l.inst.MetadataOptions
	}
	profile := func(l launched) string {
		if l.inst.IamInstanceProfile == nil {
			return ""
		}
		return str(l.inst.IamInstanceProfile.Arn)
	}
	dev := func(l launched, v ec2types.Volume) string {
		for _, a := range v.Attachments {
			return str(a.Device)
		}
		return ""
	}
	// Each field: its value on the master and the clone, and whether it
	// must be the same. The master's value must be the one the harness set
	// (not a default), or the comparison would prove nothing.
	for _, f := range []struct {
		field      string
		get        func(launched) string
		same       bool
		masterWant string // "" = anything non-empty
	}{
		{"ImageId", func(l launched) string { return str(l.inst.ImageId) }, true, ""},
		{"InstanceType", func(l launched) string { return string(l.inst.InstanceType) }, true, "t3.medium"},
		{"KeyName", func(l launched) string { return str(l.inst.KeyName) }, true, "kubernetes-clone"},
		{"IamInstanceProfile", profile, true, awstest.InstanceProfileARN},
		{"SecurityGroups", func(l launched) string { return groups(l.inst) }, true, c.SecurityGroup},
		{"MetadataOptions.HttpTokens", func(l launched) string { return string(md(l).HttpTokens) }, true, "required"},
		{"MetadataOptions.HttpPutResponseHopLimit", func(l launched) string { return i32(md(l).HttpPutResponseHopLimit) }, true, "2"},
		{"MetadataOptions.HttpEndpoint", func(l launched) string { return string(md(l).HttpEndpoint) }, true, "enabled"},
		{"Tags (but Name)", func(l launched) string { return tagString(l.inst.Tags) }, true, ""},
		{"EbsOptimized", func(l launched) string { return b(l.inst.EbsOptimized) }, true, "true"},
		{"Placement.GroupName", func(l launched) string { return str(l.inst.Placement.GroupName) }, true, "clone-masters"},
		{"Placement.Tenancy", func(l launched) string { return string(l.inst.Placement.Tenancy) }, true, "default"},
		{"CreditSpecification.CpuCredits", func(l launched) string { return l.credits }, true, "unlimited"},
		{"SourceDestCheck", func(l launched) string { return b(l.inst.SourceDestCheck) }, true, "false"},
		{"has a public address", func(l launched) string { return fmt.Sprint(str(l.inst.PublicIpAddress) != "") }, true, "true"},
		{"root: device", func(l launched) string { return dev(l, l.root) }, true, "/dev/xvda"},
		{"root: Size", func(l launched) string { return i32(l.root.Size) }, true, "32"},
		{"root: VolumeType", func(l launched) string { return string(l.root.VolumeType) }, true, "gp3"},
		{"root: Iops", func(l launched) string { return i32(l.root.Iops) }, true, "4000"},
		{"root: Throughput", func(l launched) string { return i32(l.root.Throughput) }, true, "250"},
		{"root: Encrypted", func(l launched) string { return b(l.root.Encrypted) }, true, "true"},
		{"root: KmsKeyId", func(l launched) string { return str(l.root.KmsKeyId) }, true, awstest.KMSKey},
		{"root: Tags", func(l launched) string { return tagString(l.root.Tags) }, true, ""},
		{"data: device", func(l launched) string { return dev(l, l.data) }, true, "/dev/sdb"},
		{"data: Size", func(l launched) string { return i32(l.data.Size) }, true, "20"},
		{"data: VolumeType", func(l launched) string { return string(l.data.VolumeType) }, true, "io2"},
		{"data: Iops", func(l launched) string { return i32(l.data.Iops) }, true, "3000"},
		{"data: Encrypted", func(l launched) string { return b(l.data.Encrypted) }, true, "true"},
		{"data: KmsKeyId", func(l launched) string { return str(l.data.KmsKeyId) }, true, awstest.KMSKey},
		{"data: Tags (but Name, replica)", func(l launched) string { return tagString(l.data.Tags) }, true, ""},
		{"Name", func(l launched) string { return tagOf(l.inst.Tags, awsp.TagName) }, false, c.Master},
		{"Placement.AvailabilityZone", func(l launched) string { return str(l.inst.Placement.AvailabilityZone) }, false, awstest.Zone},
		{"SubnetId (the zone's)", func(l launched) string { return str(l.inst.SubnetId) }, false, c.Subnet},
		{"PrivateIpAddress", func(l launched) string { return str(l.inst.PrivateIpAddress) }, false, c.KubeUp.Master.InternalIP},
		{"data: VolumeId", func(l launched) string { return str(l.data.VolumeId) }, false, ""},
	} {
		mv, kv := f.get(m), f.get(k)
		verdict := "same"
		if !f.same {
			verdict = "differs"
		}
		t.Logf("%-42s master %-60q clone %-60q %s", f.field, mv, kv, verdict)
		switch {
		case mv == "" || mv == "-" || (f.masterWant != "" && mv != f.masterWant):
			t.Errorf("%s: master has %q, want %q: the harness did not set it", f.field, mv, f.masterWant)
		case f.same && mv != kv:
			t.Errorf("%s: clone %q, master %q: not copied", f.field, kv, mv)
		case !f.same && mv == kv:
			t.Errorf("%s: clone has the master's own %q", f.field, kv)
		}
	}
	if got := str(k.inst.SubnetId); got != c.SubnetB {
		t.Errorf("clone in %s is in subnet %s, want %s (the zone's)", awstest.ZoneB, got, c.SubnetB)
	}
	if err := inst.Delete(ctx, name); err != nil {
		t.Fatalf("delete the clone: %v", err)
	}
}
