package aws

import (
	"context"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// Adopting a cluster kube-up made. kube-up tags nothing with hamaster's
// tags; what it does tag (kubernetes cluster/aws/util.sh, up to v1.8):
//   - start-master: the master instance Name=<MASTER_NAME>,
//     Role=<MASTER_TAG> and KubernetesCluster=<CLUSTER_ID> (add-tag), where
//     MASTER_NAME and MASTER_TAG are <INSTANCE_PREFIX>-master and
//     CLUSTER_ID is INSTANCE_PREFIX (config-default.sh);
//   - ensure-master-pd: the master's data volume Name=<MASTER_NAME>-pd and
//     KubernetesCluster, attached as /dev/sdb;
//   - ensure-master-ip: the Elastic IP's address as the volume's tag
//     kubernetes.io/master-ip (Elastic IPs took no tags then:
//     find-tagged-master-ip reads it back from the volume).
//
// Adoption is an explicit step (KubeUpProvider.Adopt, the
// providers.Adopter capability), which the mutating workflows run before
// they take the cluster lock; building the provider, and every read-only
// command, only looks (kubeUpMaster). When the cluster has no instance
// tagged hamaster.io/cluster, Adopt looks for that master 0 (KubernetesCluster=<cluster>,
// Role=<cluster>-master, running) and tags it, its data volume and its
// Elastic IP with hamaster's tags, the instance last: a crash half-way
// leaves an untagged instance, so the next run adopts again, and tagging
// twice is harmless (CreateTags overwrites with the same values).

// Kube-up's AWS tags.
const (
	TagKubernetesCluster = "KubernetesCluster"
	TagKubeUpRole        = "Role"
	TagKubeUpMasterIP    = "kubernetes.io/master-ip"
)

// kubeUpDataDevices are where kube-up attaches the master pd (/dev/sdb;
// HVM instances report it as /dev/xvdb).
var kubeUpDataDevices = []string{"/dev/sdb", "/dev/xvdb"}

// Adopt implements providers.Adopter: it tags kube-up's master 0 and
// what belongs to it when the cluster has no hamaster-tagged instance;
// nothing to adopt, or a cluster already adopted, is not an error.
func (p *KubeUpProvider) Adopt(ctx context.Context) error {
	return p.adoptKubeUp(ctx)
}

var _ providers.Adopter = (*KubeUpProvider)(nil)

// kubeUpMaster finds, without changing anything, the running master 0
// kube-up made (tags KubernetesCluster=<cluster>, Role=<cluster>-master);
// ok is false when there is none. More than one is
// errkind.FailedPrecondition.
func (p *Provider) kubeUpMaster(ctx context.Context) (m types.Instance, ok bool, err error) {
	role := p.cluster + "-master"
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		filter("tag:"+TagKubernetesCluster, p.cluster), filter("tag:"+TagKubeUpRole, role), filter("instance-state-name", "running")}})
	if err != nil {
		return m, false, mapErr(err, "look for kube-up's master of cluster %s (tags %s=%s, %s=%s)", p.cluster, TagKubernetesCluster, p.cluster, TagKubeUpRole, role)
	}
	var masters []types.Instance
	for _, r := range out.Reservations {
		masters = append(masters, r.Instances...)
	}
	switch len(masters) {
	case 0:
		return m, false, nil
	case 1:
		return masters[0], true, nil
	}
	return m, false, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: %d running instances tagged %s=%s, %s=%s and none tagged %s: kube-up makes one master; tag the one hamaster should start from with %s=%s",
		p.cluster, len(masters), TagKubernetesCluster, p.cluster, TagKubeUpRole, role, TagCluster, TagCluster, p.cluster)
}

// adoptKubeUp tags a kube-up master 0 and what belongs to it when the
// cluster has no hamaster-tagged instance; nothing to adopt is not an
// error.
func (p *Provider) adoptKubeUp(ctx context.Context) error {
	own, err := p.inst.describe(ctx, "")
	if err != nil {
		return err
	}
	if len(own) > 0 {
		return nil
	}
	m, ok, err := p.kubeUpMaster(ctx)
	if err != nil || !ok {
		return err
	}
	role := p.cluster + "-master"
	id, name := aws.ToString(m.InstanceId), tagValue(m.Tags, TagName)
	if name == "" {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s: kube-up's master %s has no %s tag (start-master tags it %s)", p.cluster, id, TagName, role)
	}
	// Its data volume: the one attached at kube-up's device.
	vols, err := p.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{filter("attachment.instance-id", id)}})
	if err != nil {
		return mapErr(err, "describe the volumes of kube-up's master %s", id)
	}
	var vol *types.Volume
	for k, v := range vols.Volumes {
		for _, a := range v.Attachments {
			if aws.ToString(a.InstanceId) == id && slices.Contains(kubeUpDataDevices, aws.ToString(a.Device)) {
				vol = &vols.Volumes[k]
			}
		}
	}
	if vol == nil {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s: kube-up's master %s (%s) has no data volume at %v (ensure-master-pd's %s-pd)", p.cluster, name, id, kubeUpDataDevices, name)
	}
	// Its Elastic IP: associated with it, else the address kube-up wrote
	// on the volume.
	as, err := p.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []types.Filter{filter("instance-id", id), filter("domain", "vpc")}})
	if err != nil {
		return mapErr(err, "describe the Elastic IP of kube-up's master %s", id)
	}
	if len(as.Addresses) == 0 {
		if ip := tagValue(vol.Tags, TagKubeUpMasterIP); ip != "" {
			if as, err = p.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{PublicIps: []string{ip}}); err != nil {
				return mapErr(err, "describe kube-up's master IP %s", ip)
			}
		}
	}
	if len(as.Addresses) != 1 {
		return errkind.Errorf(errkind.FailedPrecondition, "cluster %s: kube-up's master %s (%s) has no Elastic IP (associated, or named by its volume's %s tag)", p.cluster, name, id, TagKubeUpMasterIP)
	}
	cl := types.Tag{Key: aws.String(TagCluster), Value: aws.String(p.cluster)}
	steps := []struct {
		what string
		id   string
		tags []types.Tag
	}{
		{"data volume", aws.ToString(vol.VolumeId), []types.Tag{cl, {Key: aws.String(TagReplica), Value: aws.String(name)}, {Key: aws.String(TagRole), Value: aws.String("data")}}},
		{"Elastic IP", aws.ToString(as.Addresses[0].AllocationId), []types.Tag{cl}},
		{"instance", id, []types.Tag{cl}}, // last: see above
	}
	for _, s := range steps {
		if _, err := p.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{s.id}, Tags: s.tags}); err != nil {
			return mapErr(err, "adopt kube-up's master %s: tag its %s %s", name, s.what, s.id)
		}
	}
	p.unadopted = ""
	p.log.Info("adopted kube-up's master 0", "cluster", p.cluster, "instance", id, "name", name, "volume", aws.ToString(vol.VolumeId), "eip", aws.ToString(as.Addresses[0].PublicIp))
	return nil
}
