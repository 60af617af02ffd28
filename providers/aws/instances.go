package aws

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
)

// Keys of Template.Machine: the EC2 settings a clone copies.
const (
	MachineAMI             = "ami"
	MachineInstanceType    = "instance-type"
	MachineSubnet          = "subnet"
	MachineSecurityGroups  = "security-groups" // comma-separated IDs
	MachineInstanceProfile = "iam-instance-profile"
	MachineKeyName         = "key-name"
	MachineDataDevice      = "data-device"
	MachineDataVolumeSize  = "data-volume-size" // GiB
	MachineDataVolumeType  = "data-volume-type"
)

// Defaults of a data volume whose source has none recorded.
const (
	defaultDataDevice = "/dev/xvdb"
	defaultDataSize   = 20
	defaultDataType   = "gp3"
)

// instances implements providers.Instances with EC2 instances.
type instances struct{ p *Provider }

// instance is what hamaster needs of one EC2 instance.
type instance struct {
	id, name, clientToken string
	awsState              types.InstanceStateName
	state                 string // providers.State*
	privateIP, address    string // cloud and hamaster views
	zone, subnet, vpc     string
	raw                   types.Instance
}

func stateOf(s types.InstanceStateName) string {
	switch s {
	case types.InstanceStateNameRunning:
		return providers.StateRunning
	case types.InstanceStateNamePending:
		return providers.StateProvisioning
	default:
		return providers.StateStopped
	}
}

func tagValue(tags []types.Tag, k string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == k {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: aws.String(name), Values: values}
}

// liveStates are the states of an instance that still exists (terminated
// ones stay visible for a while).
var liveStates = []string{"pending", "running", "stopping", "stopped"}

// describe lists the cluster's live instances (named name, if set),
// sorted by name then best state first.
func (in *instances) describe(ctx context.Context, name string) ([]instance, error) {
	fs := []types.Filter{filter("tag:"+TagCluster, in.p.cluster), filter("instance-state-name", liveStates...)}
	if name != "" {
		fs = append(fs, filter("tag:"+TagName, name))
	}
	return in.describeInput(ctx, &ec2.DescribeInstancesInput{Filters: fs})
}

func (in *instances) describeInput(ctx context.Context, input *ec2.DescribeInstancesInput) ([]instance, error) {
	var out []instance
	pg := ec2.NewDescribeInstancesPaginator(in.p.ec2, input)
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, mapErr(err, "describe instances of cluster %s", in.p.cluster)
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, in.p.toInstance(i))
			}
		}
	}
	rank := map[string]int{providers.StateRunning: 0, providers.StateProvisioning: 1, providers.StateStopped: 2}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].name != out[b].name {
			return out[a].name < out[b].name
		}
		return rank[out[a].state] < rank[out[b].state]
	})
	return out, nil
}

func (p *Provider) toInstance(i types.Instance) instance {
	x := instance{
		id: aws.ToString(i.InstanceId), name: tagValue(i.Tags, TagName), clientToken: aws.ToString(i.ClientToken),
		privateIP: aws.ToString(i.PrivateIpAddress), subnet: aws.ToString(i.SubnetId), vpc: aws.ToString(i.VpcId), raw: i,
	}
	if i.State != nil {
		x.awsState = i.State.Name
	}
	x.state = stateOf(x.awsState)
	if i.Placement != nil {
		x.zone = aws.ToString(i.Placement.AvailabilityZone)
	}
	if x.privateIP != "" {
		x.address = p.amap.toNet(x.privateIP)
	}
	if x.name != "" {
		p.names.Store(x.id, x.name)
	}
	if x.address != "" {
		p.addrs.Store(x.id, x.address)
	}
	if x.name != "" && x.privateIP != "" && x.awsState != types.InstanceStateNameTerminated && x.awsState != types.InstanceStateNameShuttingDown {
		p.privIPs.Store(x.name, x.privateIP)
	}
	return x
}

// volume is a replica's data volume.
type volume struct {
	id, state, zone, replica string
	size                     int32
	vtype                    string
	attachedTo, device       string
	attachState              string
}

// dataVolumes lists the cluster's data volumes (of replica name, if set).
func (in *instances) dataVolumes(ctx context.Context, name string) ([]volume, error) {
	fs := []types.Filter{filter("tag:"+TagCluster, in.p.cluster), filter("tag:"+TagRole, "data")}
	if name != "" {
		fs = append(fs, filter("tag:"+TagReplica, name))
	}
	var out []volume
	pg := ec2.NewDescribeVolumesPaginator(in.p.ec2, &ec2.DescribeVolumesInput{Filters: fs})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, mapErr(err, "describe data volumes of cluster %s", in.p.cluster)
		}
		for _, v := range page.Volumes {
			if v.State == types.VolumeStateDeleting || v.State == types.VolumeStateDeleted {
				continue
			}
			x := volume{id: aws.ToString(v.VolumeId), state: string(v.State), zone: aws.ToString(v.AvailabilityZone), replica: tagValue(v.Tags, TagReplica), size: aws.ToInt32(v.Size), vtype: string(v.VolumeType)}
			for _, a := range v.Attachments {
				if a.State == types.VolumeAttachmentStateAttached || a.State == types.VolumeAttachmentStateAttaching {
					x.attachedTo, x.device, x.attachState = aws.ToString(a.InstanceId), aws.ToString(a.Device), string(a.State)
				}
			}
			out = append(out, x)
		}
	}
	return out, nil
}

// replica assembles a Replica: its template comes from the user data and
// the instance's and data volume's settings.
func (in *instances) replica(ctx context.Context, i instance, vols []volume) (providers.Replica, error) {
	ud, err := in.userData(ctx, i)
	if err != nil {
		return providers.Replica{}, err
	}
	f, err := in.p.TemplateFormat(Name)
	if err != nil {
		return providers.Replica{}, err
	}
	t, err := f.Decode(map[string]string{providers.DocUserData: string(ud)})
	if err != nil {
		return providers.Replica{}, fmt.Errorf("user data of %s (%s): %w", i.name, i.id, err)
	}
	if t.Machine == nil {
		t.Machine = map[string]string{}
	}
	m := t.Machine
	raw := i.raw
	m[MachineAMI] = aws.ToString(raw.ImageId)
	m[MachineInstanceType] = string(raw.InstanceType)
	m[MachineSubnet] = i.subnet
	m[MachineSecurityGroups] = strings.Join(securityGroups(raw), ",")
	if raw.IamInstanceProfile != nil {
		m[MachineInstanceProfile] = aws.ToString(raw.IamInstanceProfile.Arn)
	}
	if raw.KeyName != nil {
		m[MachineKeyName] = aws.ToString(raw.KeyName)
	}
	dataVolume := ""
	for _, v := range vols {
		if v.replica == i.name {
			m[MachineDataVolumeSize] = strconv.Itoa(int(v.size))
			m[MachineDataVolumeType] = v.vtype
			if v.device != "" {
				m[MachineDataDevice] = v.device
			}
			if v.attachedTo == i.id {
				dataVolume = v.id
			}
		}
	}
	if err := in.cloneSettings(ctx, raw, dataVolume, m); err != nil {
		return providers.Replica{}, err
	}
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return providers.Replica{Name: i.name, Zone: i.zone, Address: i.address, State: i.state, Template: t}, nil
}

// userData is the instance's user data (not base64).
func (in *instances) userData(ctx context.Context, i instance) ([]byte, error) {
	attr, err := in.p.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(i.id), Attribute: types.InstanceAttributeNameUserData})
	if err != nil {
		return nil, mapErr(err, "read user data of %s (%s)", i.name, i.id)
	}
	var ud []byte
	if attr.UserData != nil && attr.UserData.Value != nil {
		if ud, err = base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value)); err != nil {
			return nil, fmt.Errorf("user data of %s (%s) is not base64: %w", i.name, i.id, err)
		}
	}
	return ud, nil
}

// List implements providers.Instances: instances tagged with the cluster.
func (in *instances) List(ctx context.Context) ([]providers.Replica, error) {
	is, err := in.describe(ctx, "")
	if err != nil {
		return nil, err
	}
	vols, err := in.dataVolumes(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []providers.Replica
	seen := map[string]bool{}
	for _, i := range is {
		if i.name == "" || seen[i.name] {
			continue // the best instance of a name comes first
		}
		seen[i.name] = true
		r, err := in.replica(ctx, i, vols)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Get implements providers.Instances.
func (in *instances) Get(ctx context.Context, name string) (providers.Replica, error) {
	is, err := in.describe(ctx, name)
	if err != nil {
		return providers.Replica{}, err
	}
	if len(is) == 0 {
		return providers.Replica{}, errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s", name, in.p.cluster)
	}
	vols, err := in.dataVolumes(ctx, name)
	if err != nil {
		return providers.Replica{}, err
	}
	return in.replica(ctx, is[0], vols)
}

// reservation is an address reserved for a replica, kept in
// <state-dir>/<cluster>/aws/addresses.json, with the replica's launch
// intent: a client token is saved before RunInstances, so a run that
// crashed after launching finds its instance (EC2 returns the same
// instance for the same token) instead of launching a second one.
type reservation struct {
	IP     string `json:"ip"` // cloud view (private IP in Subnet)
	Subnet string `json:"subnet"`
	Zone   string `json:"zone"`
	// LaunchToken is the ClientToken of the replica's latest launch, and
	// LaunchHash the hash of what it launched.
	LaunchToken string `json:"launch_token,omitempty"`
	LaunchHash  string `json:"launch_hash,omitempty"`
}

func (in *instances) file() string {
	return filepath.Join(in.p.stateDir, in.p.cluster, "aws", "addresses.json")
}

func (in *instances) readReservations() (map[string]reservation, error) {
	m := map[string]reservation{}
	b, err := os.ReadFile(in.file())
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read address reservations: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read address reservations %s: %w", in.file(), err)
	}
	return m, nil
}

func (in *instances) writeReservations(m map[string]reservation) error {
	if err := os.MkdirAll(filepath.Dir(in.file()), 0o700); err != nil {
		return fmt.Errorf("state dir not writable: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(in.file(), b, 0o600)
}

func (in *instances) updateReservation(name string, f func(*reservation)) error {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readReservations()
	if err != nil {
		return err
	}
	r := m[name]
	f(&r)
	m[name] = r
	return in.writeReservations(m)
}

// ReserveAddress implements providers.Instances: the lowest free private
// IP of the zone's subnet (AWS keeps the first four and the last address
// of a subnet), not used by a network interface or another reservation.
func (in *instances) ReserveAddress(ctx context.Context, name, zone string) (string, error) {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readReservations()
	if err != nil {
		return "", err
	}
	if r, ok := m[name]; ok && r.IP != "" {
		return in.p.amap.toNet(r.IP), nil
	}
	is, err := in.describe(ctx, "")
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, r := range m {
		used[r.IP] = true
	}
	var src *instance
	for k := range is {
		used[is[k].privateIP] = true
		if is[k].name == name && is[k].privateIP != "" {
			// The replica exists (a reservation file lost): adopt its IP.
			m[name] = reservation{IP: is[k].privateIP, Subnet: is[k].subnet, Zone: is[k].zone}
			return in.p.amap.toNet(is[k].privateIP), in.writeReservations(m)
		}
		if src == nil && is[k].state == providers.StateRunning {
			src = &is[k]
		}
	}
	if src == nil {
		return "", errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no running instance to place %s next to", in.p.cluster, name)
	}
	subnetID, err := in.subnetFor(ctx, *src, zone)
	if err != nil {
		return "", err
	}
	sn, err := in.p.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnetID}})
	if err != nil {
		return "", mapErr(err, "describe subnet %s", subnetID)
	}
	if len(sn.Subnets) == 0 {
		return "", errkind.Errorf(errkind.NotFound, "subnet %s not found", subnetID)
	}
	prefix, err := netip.ParsePrefix(aws.ToString(sn.Subnets[0].CidrBlock))
	if err != nil {
		return "", fmt.Errorf("subnet %s: CIDR %q: %w", subnetID, aws.ToString(sn.Subnets[0].CidrBlock), err)
	}
	pg := ec2.NewDescribeNetworkInterfacesPaginator(in.p.ec2, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{filter("subnet-id", subnetID)}})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return "", mapErr(err, "describe network interfaces of subnet %s", subnetID)
		}
		for _, ni := range page.NetworkInterfaces {
			for _, a := range ni.PrivateIpAddresses {
				used[aws.ToString(a.PrivateIpAddress)] = true
			}
		}
	}
	prefix = prefix.Masked()
	a := prefix.Addr()
	for k := 0; k < 4; k++ {
		a = a.Next()
	}
	for ; prefix.Contains(a); a = a.Next() {
		if next := a.Next(); !prefix.Contains(next) {
			break // the last address is reserved too
		}
		if used[a.String()] {
			continue
		}
		m[name] = reservation{IP: a.String(), Subnet: subnetID, Zone: aws.ToString(sn.Subnets[0].AvailabilityZone)}
		if err := in.writeReservations(m); err != nil {
			return "", err
		}
		return in.p.amap.toNet(a.String()), nil
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "subnet %s (%s) has no free address", subnetID, prefix)
}

// subnetFor picks the subnet of zone: the configured one, the source's
// own when the zone is its zone (or unset), else a subnet of the source's
// VPC in that zone.
func (in *instances) subnetFor(ctx context.Context, src instance, zone string) (string, error) {
	if s, ok := in.p.subnetByZone[zone]; ok && zone != "" {
		return s, nil
	}
	if zone == "" || zone == src.zone {
		return src.subnet, nil
	}
	out, err := in.p.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{filter("vpc-id", src.vpc), filter("availability-zone", zone)}})
	if err != nil {
		return "", mapErr(err, "find a subnet in zone %s", zone)
	}
	if len(out.Subnets) == 0 {
		return "", errkind.Errorf(errkind.InvalidArgument, "--zone %s: VPC %s has no subnet there (or pass --%s)", zone, src.vpc, OptSubnets)
	}
	best := out.Subnets[0]
	for _, s := range out.Subnets {
		if tagValue(s.Tags, TagCluster) == in.p.cluster {
			best = s
			break
		}
	}
	return aws.ToString(best.SubnetId), nil
}

// ReleaseAddress implements providers.Instances.
func (in *instances) ReleaseAddress(_ context.Context, name string) error {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readReservations()
	if err != nil {
		return err
	}
	if _, ok := m[name]; !ok {
		return nil
	}
	delete(m, name)
	return in.writeReservations(m)
}

func (in *instances) reservation(name string) (reservation, error) {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readReservations()
	if err != nil {
		return reservation{}, err
	}
	r, ok := m[name]
	if !ok || r.IP == "" {
		return reservation{}, errkind.Errorf(errkind.FailedPrecondition, "replica %s has no reserved address (reserve-address first)", name)
	}
	return r, nil
}

// Create implements providers.Instances: data volume (found by its tags,
// or created), RunInstances on the reserved address with the saved client
// token, wait until running, attach the data volume.
func (in *instances) Create(ctx context.Context, name, _ string, tmpl providers.Template) (providers.Replica, error) {
	is, err := in.describe(ctx, name)
	if err != nil {
		return providers.Replica{}, err
	}
	if len(is) > 0 {
		if err := in.finish(ctx, is[0].id, name, tmpl); err != nil {
			return providers.Replica{}, fmt.Errorf("create replica %s: %w", name, err)
		}
		return in.Get(ctx, name)
	}
	if err := in.launch(ctx, name, tmpl, false); err != nil {
		return providers.Replica{}, fmt.Errorf("create replica %s: %w", name, err)
	}
	return in.Get(ctx, name)
}

// Recreate implements providers.Instances: terminate the instance (its
// data volume survives: it is not deleted on termination), launch one from
// tmpl on the same address, attach the same data volume. An instance that
// the replica's latest launch already booted from tmpl is kept (so a re-run
// after a crash or a success converges instead of replacing it again).
func (in *instances) Recreate(ctx context.Context, name string, tmpl providers.Template) (providers.Replica, error) {
	is, err := in.describe(ctx, name)
	if err != nil {
		return providers.Replica{}, err
	}
	if len(is) == 0 {
		return providers.Replica{}, errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s", name, in.p.cluster)
	}
	if _, err := in.reservation(name); err != nil {
		// Reserved by another hamaster (or before this state dir): adopt.
		i := is[0]
		if err := in.updateReservation(name, func(r *reservation) { *r = reservation{IP: i.privateIP, Subnet: i.subnet, Zone: i.zone} }); err != nil {
			return providers.Replica{}, err
		}
	}
	if err := in.launch(ctx, name, tmpl, true); err != nil {
		return providers.Replica{}, fmt.Errorf("recreate replica %s: %w", name, err)
	}
	return in.Get(ctx, name)
}

func launchHash(ud []byte, m map[string]string) string {
	h := sha256.New()
	h.Write(ud)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "\x00%s=%s", k, m[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// launch boots the replica from tmpl. With replace, live instances of the
// name not launched by this launch's token are terminated first (their
// private IP must be free again).
func (in *instances) launch(ctx context.Context, name string, tmpl providers.Template, replace bool) error {
	res, err := in.reservation(name)
	if err != nil {
		return err
	}
	// The user data is written (a new version's release hashes fetched)
	// before anything changes.
	f, err := in.p.TemplateFormat(Name)
	if err != nil {
		return err
	}
	docs, err := f.Encode(ctx, tmpl)
	if err != nil {
		return err
	}
	ud := []byte(docs[providers.DocUserData])
	m := tmpl.Machine
	for _, k := range []string{MachineAMI, MachineInstanceType} {
		if m[k] == "" {
			return errkind.Errorf(errkind.InvalidArgument, "template of %s: machine setting %q is empty", name, k)
		}
	}
	hash := launchHash(ud, m)
	if res.LaunchToken == "" || res.LaunchHash != hash {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		res.LaunchToken, res.LaunchHash = "hm-"+hex.EncodeToString(b), hash
		if err := in.updateReservation(name, func(r *reservation) { r.LaunchToken, r.LaunchHash = res.LaunchToken, res.LaunchHash }); err != nil {
			return err
		}
	}
	vol, err := in.ensureVolume(ctx, name, res, m)
	if err != nil {
		return err
	}
	is, err := in.describe(ctx, name)
	if err != nil {
		return err
	}
	var ours string
	var old []string
	for _, i := range is {
		if i.clientToken == res.LaunchToken {
			ours = i.id
		} else {
			old = append(old, i.id)
		}
	}
	if replace && len(old) > 0 {
		if err := in.terminate(ctx, old); err != nil {
			return err
		}
	}
	if ours == "" {
		input := &ec2.RunInstancesInput{
			ImageId:      aws.String(m[MachineAMI]),
			InstanceType: types.InstanceType(m[MachineInstanceType]),
			MinCount:     aws.Int32(1),
			MaxCount:     aws.Int32(1),
			// The primary interface is spelled out (subnet, reserved IP,
			// security groups, deleted with the instance) so that the
			// address is free again as soon as the instance is terminated
			// (Recreate launches on the same address).
			NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{{
				DeviceIndex:         aws.Int32(0),
				SubnetId:            aws.String(res.Subnet),
				PrivateIpAddress:    aws.String(res.IP),
				DeleteOnTermination: aws.Bool(true),
			}},
			UserData:    aws.String(base64.StdEncoding.EncodeToString(ud)),
			ClientToken: aws.String(res.LaunchToken),
		}
		own := []types.Tag{{Key: aws.String(TagCluster), Value: aws.String(in.p.cluster)}, {Key: aws.String(TagName), Value: aws.String(name)}}
		if err := applyClone(input, m, res.Zone, own); err != nil {
			return fmt.Errorf("launch %s: %w", name, err)
		}
		if sg := m[MachineSecurityGroups]; sg != "" {
			input.NetworkInterfaces[0].Groups = strings.Split(sg, ",")
		}
		if m[MachinePublicIP] == "true" {
			input.NetworkInterfaces[0].AssociatePublicIpAddress = aws.Bool(true)
		}
		if v := m[MachineInstanceProfile]; v != "" {
			input.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(v)}
		}
		if v := m[MachineKeyName]; v != "" {
			input.KeyName = aws.String(v)
		}
		out, err := in.p.ec2.RunInstances(ctx, input)
		if err != nil {
			return mapErr(err, "run instance for %s", name)
		}
		if len(out.Instances) == 0 {
			return errkind.Errorf(errkind.Unavailable, "run instance for %s: no instance returned", name)
		}
		ours = aws.ToString(out.Instances[0].InstanceId)
	}
	return in.finish(ctx, ours, name, tmpl, vol)
}

// finish waits until the instance runs and its data volume is attached.
// A new instance is not visible to Describe calls at once
// (InvalidInstanceID.NotFound): the running waiter retries on that.
func (in *instances) finish(ctx context.Context, id, name string, tmpl providers.Template, vols ...volume) error {
	w := ec2.NewInstanceRunningWaiter(in.p.ec2, func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = in.p.poll, in.p.maxDelay()
	})
	out, err := w.WaitForOutput(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, in.p.waitMax(ctx))
	if err != nil {
		var stopped bool
		if is, derr := in.describeInput(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); derr == nil && len(is) == 1 && is[0].awsState == types.InstanceStateNameStopped {
			stopped = true
		}
		if !stopped {
			return mapErr(err, "wait until %s (%s) runs", name, id)
		}
		if _, err := in.p.ec2.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
			return mapErr(err, "start %s (%s)", name, id)
		}
		if out, err = w.WaitForOutput(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, in.p.waitMax(ctx)); err != nil {
			return mapErr(err, "wait until %s (%s) runs", name, id)
		}
	}
	var device string
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			in.p.toInstance(i)
			if err := in.ensureSourceDestCheck(ctx, i, tmpl.Machine); err != nil {
				return err
			}
		}
	}
	device = tmpl.Machine[MachineDataDevice]
	if device == "" {
		device = defaultDataDevice
	}
	var vol volume
	if len(vols) > 0 {
		vol = vols[0]
	} else {
		res, err := in.reservation(name)
		if err != nil {
			return err
		}
		if vol, err = in.ensureVolume(ctx, name, res, tmpl.Machine); err != nil {
			return err
		}
	}
	return in.attach(ctx, vol, id, device)
}

// ensureVolume finds the replica's data volume by its tags or creates it
// in the reserved subnet's zone (idempotent through a client token).
func (in *instances) ensureVolume(ctx context.Context, name string, res reservation, m map[string]string) (volume, error) {
	vols, err := in.dataVolumes(ctx, name)
	if err != nil {
		return volume{}, err
	}
	if len(vols) == 0 {
		size := int32(defaultDataSize)
		if v, err := strconv.Atoi(m[MachineDataVolumeSize]); err == nil && v > 0 {
			size = int32(v)
		}
		vt := m[MachineDataVolumeType]
		if vt == "" {
			vt = defaultDataType
		}
		sum := sha256.Sum256([]byte(in.p.cluster + "/" + name + "/" + res.IP + "/" + res.LaunchToken))
		input := &ec2.CreateVolumeInput{
			AvailabilityZone: aws.String(res.Zone),
			Size:             aws.Int32(size),
			VolumeType:       types.VolumeType(vt),
			ClientToken:      aws.String("hm-vol-" + hex.EncodeToString(sum[:12])),
			TagSpecifications: []types.TagSpecification{{
				ResourceType: types.ResourceTypeVolume,
				Tags: []types.Tag{
					{Key: aws.String(TagCluster), Value: aws.String(in.p.cluster)},
					{Key: aws.String(TagName), Value: aws.String(name + "-data")},
					{Key: aws.String(TagReplica), Value: aws.String(name)},
					{Key: aws.String(TagRole), Value: aws.String("data")},
				},
			}},
		}
		if err := applyDataVolume(input, m); err != nil {
			return volume{}, fmt.Errorf("data volume of %s: %w", name, err)
		}
		out, err := in.p.ec2.CreateVolume(ctx, input)
		if err != nil {
			return volume{}, mapErr(err, "create data volume of %s", name)
		}
		vols = []volume{{id: aws.ToString(out.VolumeId), state: string(out.State), zone: res.Zone, replica: name, size: size, vtype: vt}}
	}
	v := vols[0]
	if v.state == string(types.VolumeStateCreating) {
		w := ec2.NewVolumeAvailableWaiter(in.p.ec2, func(o *ec2.VolumeAvailableWaiterOptions) { o.MinDelay, o.MaxDelay = in.p.poll, in.p.maxDelay() })
		if err := w.Wait(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{v.id}}, in.p.waitMax(ctx)); err != nil {
			return volume{}, mapErr(err, "wait until data volume %s of %s is available", v.id, name)
		}
		v.state = string(types.VolumeStateAvailable)
	}
	return v, nil
}

// attach attaches the data volume to the instance, first waiting for a
// previous instance (being terminated) to let go of it.
func (in *instances) attach(ctx context.Context, v volume, id, device string) error {
	var cur volume
	err := in.p.pollUntil(ctx, fmt.Sprintf("data volume %s to be free for %s", v.id, id), func() (bool, error) {
		vs, err := in.p.volume(ctx, v.id)
		if err != nil {
			return false, err
		}
		cur = vs
		return cur.attachedTo == "" || cur.attachedTo == id, nil
	})
	if err != nil {
		return err
	}
	if cur.attachedTo == id && cur.attachState == string(types.VolumeAttachmentStateAttached) {
		return nil
	}
	if cur.attachedTo == "" {
		if _, err := in.p.ec2.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(v.id), InstanceId: aws.String(id), Device: aws.String(device)}); err != nil && code(err) != "VolumeInUse" {
			return mapErr(err, "attach data volume %s to %s", v.id, id)
		}
	}
	w := ec2.NewVolumeInUseWaiter(in.p.ec2, func(o *ec2.VolumeInUseWaiterOptions) { o.MinDelay, o.MaxDelay = in.p.poll, in.p.maxDelay() })
	if err := w.Wait(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{v.id}}, in.p.waitMax(ctx)); err != nil {
		return mapErr(err, "wait until data volume %s is attached to %s", v.id, id)
	}
	return nil
}

func (p *Provider) volume(ctx context.Context, id string) (volume, error) {
	out, err := p.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil {
		return volume{}, mapErr(err, "describe volume %s", id)
	}
	if len(out.Volumes) == 0 {
		return volume{}, errkind.Errorf(errkind.NotFound, "volume %s not found", id)
	}
	v := out.Volumes[0]
	x := volume{id: id, state: string(v.State)}
	for _, a := range v.Attachments {
		if a.State == types.VolumeAttachmentStateAttached || a.State == types.VolumeAttachmentStateAttaching {
			x.attachedTo, x.device, x.attachState = aws.ToString(a.InstanceId), aws.ToString(a.Device), string(a.State)
		}
	}
	return x, nil
}

// terminate terminates instances and waits until they are gone.
func (in *instances) terminate(ctx context.Context, ids []string) error {
	if _, err := in.p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil && code(err) != "InvalidInstanceID.NotFound" {
		return mapErr(err, "terminate %v", ids)
	}
	w := ec2.NewInstanceTerminatedWaiter(in.p.ec2, func(o *ec2.InstanceTerminatedWaiterOptions) { o.MinDelay, o.MaxDelay = in.p.poll, in.p.maxDelay() })
	if err := w.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, in.p.waitMax(ctx)); err != nil && code(err) != "InvalidInstanceID.NotFound" {
		return mapErr(err, "wait until %v are terminated", ids)
	}
	return nil
}

// Delete implements providers.Instances: terminate, delete the data
// volume once free, release the address.
func (in *instances) Delete(ctx context.Context, name string) error {
	is, err := in.describe(ctx, name)
	if err != nil {
		return err
	}
	if len(is) > 0 {
		var ids []string
		for _, i := range is {
			ids = append(ids, i.id)
		}
		if err := in.terminate(ctx, ids); err != nil {
			return fmt.Errorf("delete replica %s: %w", name, err)
		}
	}
	vols, err := in.dataVolumes(ctx, name)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if err := in.p.pollUntil(ctx, "data volume "+v.id+" to be detached", func() (bool, error) {
			cur, err := in.p.volume(ctx, v.id)
			if errors.Is(err, errkind.NotFound) {
				return true, nil
			}
			return err == nil && cur.attachedTo == "", err
		}); err != nil {
			return fmt.Errorf("delete replica %s: %w", name, err)
		}
		if _, err := in.p.ec2.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(v.id)}); err != nil && code(err) != "InvalidVolume.NotFound" {
			return mapErr(err, "delete replica %s: delete data volume %s", name, v.id)
		}
		w := ec2.NewVolumeDeletedWaiter(in.p.ec2, func(o *ec2.VolumeDeletedWaiterOptions) { o.MinDelay, o.MaxDelay = in.p.poll, in.p.maxDelay() })
		if err := w.Wait(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{v.id}}, in.p.waitMax(ctx)); err != nil && code(err) != "InvalidVolume.NotFound" {
			return mapErr(err, "delete replica %s: wait until data volume %s is deleted", name, v.id)
		}
	}
	return in.ReleaseAddress(ctx, name)
}
