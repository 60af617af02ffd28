package gce

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// Keys of Template.Machine: the instance settings copied when cloning.
const (
	MachineType         = "machine-type"
	MachineImage        = "image"
	MachineBootDiskGB   = "boot-disk-size-gb"
	MachineBootDiskType = "boot-disk-type"
	MachineDataDiskGB   = "data-disk-size-gb"
	MachineDataDiskType = "data-disk-type"
	MachineNetwork      = "network"
	MachineSubnetwork   = "subnetwork"
	MachineTags         = "tags" // comma-separated network tags
	MachineSA           = "service-account"
	MachineScopes       = "scopes" // comma-separated
	machineMetadata     = "metadata."
	machineLabel        = "label."
)

// instances implements providers.Instances with Compute Engine VMs.
type instances struct{ p *Provider }

// filter finds masters the way kube-up does: by name, MASTER_NAME or
// MASTER_NAME-xyz (cluster/gce/util.sh get-replica-name-regexp, anchored:
// Compute's `eq` matches the whole name with RE2), never by a label, so a
// cluster kube-up built is adopted as it is.
func (in *instances) filter() string {
	return fmt.Sprintf("name eq \"%s(-[a-z0-9]{3})?\"", regexp.QuoteMeta(in.p.masterName()))
}

// isMasterName reports whether name is one filter finds: MASTER_NAME,
// or MASTER_NAME-xyz with three lowercase letters or digits (kube-up's
// set-replica-name: the first three hex digits of an md5).
func (in *instances) isMasterName(name string) bool {
	if name == in.p.masterName() {
		return true
	}
	s, ok := strings.CutPrefix(name, in.p.masterName()+"-")
	return ok && replicaSuffixRE.MatchString(s)
}

var replicaSuffixRE = regexp.MustCompile(`^[a-z0-9]{3}$`)

// List implements providers.Instances: the masters (by name) in every
// configured zone, sorted by name.
func (in *instances) List(ctx context.Context) ([]providers.Replica, error) {
	raw, err := in.listRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]providers.Replica, 0, len(raw))
	for _, x := range raw {
		r, err := in.replica(ctx, x)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (in *instances) listRaw(ctx context.Context) ([]*computepb.Instance, error) {
	var all []*computepb.Instance
	for _, z := range in.p.zones {
		var got []*computepb.Instance
		err := retry(ctx, "list instances in "+z, func(ctx context.Context) error {
			got = nil
			it := in.p.instances.List(ctx, &computepb.ListInstancesRequest{Project: in.p.project, Zone: z, Filter: proto.String(in.filter())})
			for {
				x, err := it.Next()
				if errors.Is(err, iterator.Done) {
					return nil
				}
				if err != nil {
					return err
				}
				got = append(got, x)
			}
		})
		if err != nil {
			return nil, err
		}
		in.p.mu.Lock()
		for _, x := range got {
			if in.isMasterName(x.GetName()) {
				in.p.zoneOf[x.GetName()] = z
				all = append(all, x)
			}
		}
		in.p.mu.Unlock()
	}
	return all, nil
}

// getRaw finds the instance in its zone (cached) or in any configured zone.
func (in *instances) getRaw(ctx context.Context, name string) (*computepb.Instance, string, error) {
	in.p.mu.Lock()
	cached := in.p.zoneOf[name]
	in.p.mu.Unlock()
	zones := in.p.zones
	if cached != "" {
		zones = append([]string{cached}, without(in.p.zones, cached)...)
	}
	for _, z := range zones {
		var x *computepb.Instance
		err := retry(ctx, "get instance "+name, func(ctx context.Context) error {
			var err error
			x, err = in.p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: in.p.project, Zone: z, Instance: name})
			return err
		})
		if errors.Is(err, errkind.NotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if !in.isMasterName(name) {
			return nil, "", errkind.Errorf(errkind.NotFound, "instance %s in %s is not a master of cluster %s: kube-up names masters %s and %s-<3 characters> (--%s)", name, z, in.p.cluster, in.p.masterName(), in.p.masterName(), OptMasterName)
		}
		in.p.mu.Lock()
		in.p.zoneOf[name] = z
		in.p.mu.Unlock()
		return x, z, nil
	}
	return nil, "", errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s (zones %s)", name, in.p.cluster, strings.Join(in.p.zones, ","))
}

func without(ss []string, s string) []string {
	var out []string
	for _, x := range ss {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Get implements providers.Instances.
func (in *instances) Get(ctx context.Context, name string) (providers.Replica, error) {
	x, _, err := in.getRaw(ctx, name)
	if err != nil {
		return providers.Replica{}, err
	}
	return in.replica(ctx, x)
}

// replica converts an instance; its template is read back from the
// instance's settings and metadata (disk details from the disks, cached:
// a disk's image never changes).
func (in *instances) replica(ctx context.Context, x *computepb.Instance) (providers.Replica, error) {
	r := providers.Replica{Name: x.GetName(), Zone: lastSeg(x.GetZone())}
	switch x.GetStatus() {
	case "RUNNING":
		r.State = providers.StateRunning
	case "PROVISIONING", "STAGING":
		r.State = providers.StateProvisioning
	default:
		r.State = providers.StateStopped
	}
	t := providers.Template{Env: map[string]string{}, Files: map[string][]byte{}, Machine: map[string]string{}}
	m := t.Machine
	m[MachineType] = lastSeg(x.GetMachineType())
	if nics := x.GetNetworkInterfaces(); len(nics) > 0 {
		r.Address = nics[0].GetNetworkIP()
		for _, ac := range nics[0].GetAccessConfigs() {
			if ac.GetNatIP() != "" {
				r.External = ac.GetNatIP()
			}
		}
		m[MachineNetwork] = relLink(nics[0].GetNetwork())
		m[MachineSubnetwork] = relLink(nics[0].GetSubnetwork())
	}
	if tags := x.GetTags().GetItems(); len(tags) > 0 {
		m[MachineTags] = strings.Join(tags, ",")
	}
	if sas := x.GetServiceAccounts(); len(sas) > 0 {
		m[MachineSA] = sas[0].GetEmail()
		m[MachineScopes] = strings.Join(sas[0].GetScopes(), ",")
	}
	for k, v := range x.GetLabels() {
		if !strings.HasPrefix(k, "hamaster-") {
			m[machineLabel+k] = v
		}
	}
	for _, d := range x.GetDisks() {
		info, err := in.disk(ctx, d.GetSource())
		if err != nil {
			return r, err
		}
		if d.GetBoot() {
			m[MachineImage], m[MachineBootDiskType] = info.image, info.typ
			m[MachineBootDiskGB] = strconv.FormatInt(info.sizeGb, 10)
		} else if d.GetDeviceName() == dataDeviceName {
			m[MachineDataDiskType] = info.typ
			m[MachineDataDiskGB] = strconv.FormatInt(info.sizeGb, 10)
		}
	}
	f, err := in.p.TemplateFormat(Name)
	if err != nil {
		return r, err
	}
	docs := map[string]string{}
	for _, it := range x.GetMetadata().GetItems() {
		if f.Owns(it.GetKey()) {
			docs[it.GetKey()] = it.GetValue()
		} else {
			m[machineMetadata+it.GetKey()] = it.GetValue()
		}
	}
	ft, err := f.Decode(docs)
	if err != nil {
		return r, fmt.Errorf("instance %s: %w", x.GetName(), err)
	}
	t.Version, t.ExtraArgs, t.Env, t.Files = ft.Version, ft.ExtraArgs, ft.Env, ft.Files
	r.Template = t
	return r, nil
}

// relLink turns https://www.googleapis.com/compute/v1/projects/... into
// projects/....
func relLink(u string) string {
	if i := strings.Index(u, "projects/"); i >= 0 {
		return u[i:]
	}
	return u
}

func (in *instances) disk(ctx context.Context, source string) (diskInfo, error) {
	in.p.mu.Lock()
	info, ok := in.p.diskInfo[source]
	in.p.mu.Unlock()
	if ok {
		return info, nil
	}
	rel := relLink(source)
	parts := strings.Split(rel, "/") // projects/P/zones/Z/disks/D
	if len(parts) != 6 {
		return info, fmt.Errorf("disk link %q not understood", source)
	}
	var d *computepb.Disk
	err := retry(ctx, "get disk "+parts[5], func(ctx context.Context) error {
		var err error
		d, err = in.p.disks.Get(ctx, &computepb.GetDiskRequest{Project: in.p.project, Zone: parts[3], Disk: parts[5]})
		return err
	})
	if err != nil {
		return info, err
	}
	info = diskInfo{image: relLink(d.GetSourceImage()), typ: lastSeg(d.GetType()), sizeGb: d.GetSizeGb()}
	in.p.mu.Lock()
	in.p.diskInfo[source] = info
	in.p.mu.Unlock()
	return info, nil
}

// ReserveAddress implements providers.Instances: a regional INTERNAL
// address <name>-ip in the subnetwork.
func (in *instances) ReserveAddress(ctx context.Context, name, _ string) (string, error) {
	return in.reserveAddress(ctx, name, "")
}

// reserveAddress reserves <name>-internal: ip "" takes any free address
// of the subnetwork; an ip the instance already uses is promoted to a
// reservation (as `gcloud compute addresses create --addresses IP` does
// for an ephemeral internal IP), so it survives the instance's deletion.
func (in *instances) reserveAddress(ctx context.Context, name, ip string) (string, error) {
	if err := in.checkName(name); err != nil {
		return "", err
	}
	an := addressName(name)
	get := func() (*computepb.Address, error) {
		var a *computepb.Address
		err := retry(ctx, "get address "+an, func(ctx context.Context) error {
			var err error
			a, err = in.p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: in.p.project, Region: in.p.region, Address: an})
			return err
		})
		return a, err
	}
	if a, err := get(); err == nil {
		return a.GetAddress(), nil
	} else if !errors.Is(err, errkind.NotFound) {
		return "", err
	}
	err := in.p.mutate(ctx, "reserve address "+an, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return in.p.addresses.Insert(ctx, &computepb.InsertAddressRequest{Project: in.p.project, Region: in.p.region, RequestId: rid,
			AddressResource: &computepb.Address{
				Name: proto.String(an), AddressType: proto.String("INTERNAL"), Purpose: proto.String("GCE_ENDPOINT"),
				Subnetwork:  proto.String(in.p.subnet),
				Description: proto.String(fmt.Sprintf("hamaster cluster %s: internal address of replica %s", in.p.cluster, name)),
				Labels:      in.p.labels(),
				Address:     optional(ip),
			}})
	})
	if err := ignore(err, errkind.AlreadyExists); err != nil {
		return "", err
	}
	var a *computepb.Address
	if err := in.p.visible(ctx, "address "+an, func(context.Context) error {
		var err error
		a, err = get()
		return err
	}); err != nil {
		return "", err
	}
	return a.GetAddress(), nil
}

// checkName refuses a replica name kube-up's discovery would not find.
func (in *instances) checkName(name string) error {
	if !in.isMasterName(name) {
		return errkind.Errorf(errkind.InvalidArgument, "replica name %q: masters of cluster %s are named %s-<3 lowercase letters or digits> (kube-up's MASTER_NAME-xyz; MASTER_NAME is --%s, default <cluster>-master)", name, in.p.cluster, in.p.masterName(), OptMasterName)
	}
	return nil
}

// ReleaseAddress implements providers.Instances.
func (in *instances) ReleaseAddress(ctx context.Context, name string) error {
	an := addressName(name)
	return ignore(in.p.mutate(ctx, "release address "+an, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return in.p.addresses.Delete(ctx, &computepb.DeleteAddressRequest{Project: in.p.project, Region: in.p.region, Address: an, RequestId: rid})
	}), errkind.NotFound)
}

// pickZone is zone, or the configured zone with the fewest replicas.
func (in *instances) pickZone(ctx context.Context, zone string) (string, error) {
	if zone != "" {
		for _, z := range in.p.zones {
			if z == zone {
				return zone, nil
			}
		}
		return "", errkind.Errorf(errkind.InvalidArgument, "--zone %s is not one of the provider's zones (%s)", zone, strings.Join(in.p.zones, ","))
	}
	if len(in.p.zones) == 1 {
		return in.p.zones[0], nil
	}
	raw, err := in.listRaw(ctx)
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	for _, x := range raw {
		count[lastSeg(x.GetZone())]++
	}
	best := in.p.zones[0]
	for _, z := range in.p.zones {
		if count[z] < count[best] {
			best = z
		}
	}
	return best, nil
}

// Create implements providers.Instances: a data disk <name>-pd (device
// master-pd, kept when the instance is deleted), then the instance.
func (in *instances) Create(ctx context.Context, name, zone string, tmpl providers.Template) (providers.Replica, error) {
	if err := in.checkName(name); err != nil {
		return providers.Replica{}, err
	}
	if r, err := in.Get(ctx, name); err == nil {
		return r, nil
	} else if !errors.Is(err, errkind.NotFound) {
		return providers.Replica{}, err
	}
	docs, err := in.encode(ctx, tmpl)
	if err != nil {
		return providers.Replica{}, fmt.Errorf("create replica %s: %w", name, err)
	}
	zone, err = in.pickZone(ctx, zone)
	if err != nil {
		return providers.Replica{}, err
	}
	addr, err := in.ReserveAddress(ctx, name, zone)
	if err != nil {
		return providers.Replica{}, err
	}
	if err := in.ensureDataDisk(ctx, name, zone, tmpl); err != nil {
		return providers.Replica{}, err
	}
	if err := in.insert(ctx, name, zone, tmpl, docs, addr, ""); err != nil {
		return providers.Replica{}, fmt.Errorf("create replica %s: %w", name, err)
	}
	return in.getVisible(ctx, name)
}

func (in *instances) ensureDataDisk(ctx context.Context, name, zone string, tmpl providers.Template) error {
	dn := dataDiskName(name)
	size, _ := strconv.ParseInt(tmpl.Machine[MachineDataDiskGB], 10, 64)
	if size <= 0 {
		size = 20
	}
	typ := tmpl.Machine[MachineDataDiskType]
	if typ == "" {
		typ = "pd-ssd"
	}
	err := in.p.mutate(ctx, "create data disk "+dn, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return in.p.disks.Insert(ctx, &computepb.InsertDiskRequest{Project: in.p.project, Zone: zone, RequestId: rid, DiskResource: &computepb.Disk{
			Name: proto.String(dn), SizeGb: proto.Int64(size), Type: proto.String(in.p.zoneLink(zone, "diskTypes", typ)),
			Labels: in.p.labels(), Description: proto.String(fmt.Sprintf("hamaster cluster %s: etcd data of replica %s", in.p.cluster, name)),
		}})
	})
	return ignore(err, errkind.AlreadyExists)
}

// insert creates the instance from tmpl, its metadata docs (encode), on
// the existing data disk; natIP "" means an ephemeral external IP.
func (in *instances) insert(ctx context.Context, name, zone string, tmpl providers.Template, docs map[string]string, addr, natIP string) error {
	m := tmpl.Machine
	var items []*computepb.Items
	for _, k := range slices.Sorted(maps.Keys(docs)) {
		items = append(items, &computepb.Items{Key: proto.String(k), Value: proto.String(docs[k])})
	}
	labels := in.p.labels()
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if mk, ok := strings.CutPrefix(k, machineMetadata); ok {
			items = append(items, &computepb.Items{Key: proto.String(mk), Value: proto.String(m[k])})
		}
		if lk, ok := strings.CutPrefix(k, machineLabel); ok {
			labels[lk] = m[k]
		}
	}
	or := func(k, def string) string {
		if v := m[k]; v != "" {
			return v
		}
		return def
	}
	bootGB, _ := strconv.ParseInt(or(MachineBootDiskGB, "20"), 10, 64)
	nic := &computepb.NetworkInterface{
		Network: proto.String(or(MachineNetwork, in.p.network)), Subnetwork: proto.String(or(MachineSubnetwork, in.p.subnet)),
		NetworkIP:     proto.String(addr),
		AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT")}},
	}
	if natIP != "" {
		nic.AccessConfigs[0].NatIP = proto.String(natIP)
	}
	inst := &computepb.Instance{
		Name:        proto.String(name),
		Description: proto.String(fmt.Sprintf("hamaster cluster %s: control-plane replica", in.p.cluster)),
		MachineType: proto.String(in.p.zoneLink(zone, "machineTypes", or(MachineType, "e2-standard-2"))),
		Disks: []*computepb.AttachedDisk{
			{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String(or(MachineImage, "projects/cos-cloud/global/images/family/cos-stable")),
				DiskSizeGb:  proto.Int64(bootGB),
				DiskType:    proto.String(in.p.zoneLink(zone, "diskTypes", or(MachineBootDiskType, "pd-balanced"))),
			}},
			{Source: proto.String(in.p.zoneLink(zone, "disks", dataDiskName(name))), DeviceName: proto.String(dataDeviceName), AutoDelete: proto.Bool(false)},
		},
		NetworkInterfaces: []*computepb.NetworkInterface{nic},
		Metadata:          &computepb.Metadata{Items: items},
		Labels:            labels,
	}
	if tags := m[MachineTags]; tags != "" {
		inst.Tags = &computepb.Tags{Items: strings.Split(tags, ",")}
	}
	if sa := m[MachineSA]; sa != "" {
		var scopes []string
		if s := m[MachineScopes]; s != "" {
			scopes = strings.Split(s, ",")
		}
		inst.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(sa), Scopes: scopes}}
	}
	err := in.p.mutate(ctx, "insert instance "+name, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return in.p.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: in.p.project, Zone: zone, RequestId: rid, InstanceResource: inst})
	})
	if errors.Is(err, errkind.AlreadyExists) && strings.Contains(err.Error(), "/disks/") {
		// The 409 is about the boot disk the insert would create, not the
		// instance: a leftover of an earlier instance of this name.
		return errkind.Errorf(errkind.FailedPrecondition, "insert instance %s: its boot disk already exists (left by an earlier instance %s in %s): delete that disk, then re-run: %w", name, name, zone, err)
	}
	if err := ignore(err, errkind.AlreadyExists); err != nil {
		return err
	}
	in.p.mu.Lock()
	in.p.zoneOf[name] = zone
	in.p.mu.Unlock()
	return nil
}

// findDataDisk returns the zone holding <name>-pd ("" when none).
func (in *instances) findDataDisk(ctx context.Context, name string) (string, error) {
	for _, z := range in.p.zones {
		err := retry(ctx, "get disk "+dataDiskName(name), func(ctx context.Context) error {
			_, err := in.p.disks.Get(ctx, &computepb.GetDiskRequest{Project: in.p.project, Zone: z, Disk: dataDiskName(name)})
			return err
		})
		if err == nil {
			return z, nil
		}
		if !errors.Is(err, errkind.NotFound) {
			return "", err
		}
	}
	return "", nil
}

// Recreate implements providers.Instances: delete the instance (the data
// disk is not auto-deleted), insert it again from tmpl with the same name,
// zone, data disk and internal address; an instance that held the static
// IP gets it back. A crash between the two is resumed: no instance but a
// data disk means "insert again".
func (in *instances) Recreate(ctx context.Context, name string, tmpl providers.Template) (providers.Replica, error) {
	// The template is written (a new release's hashes fetched) before the
	// instance is deleted: a version without a release leaves the replica
	// as it is.
	docs, err := in.encode(ctx, tmpl)
	if err != nil {
		return providers.Replica{}, fmt.Errorf("recreate replica %s: %w", name, err)
	}
	x, zone, err := in.getRaw(ctx, name)
	natIP := ""
	switch {
	case err == nil:
		// Keep the internal address across the recreate: kube-up's master
		// 0 has no reservation of its own (create-master reserves only the
		// static IP), and without one its address would be free for any
		// other VM while it is deleted.
		if _, err := in.reserveAddress(ctx, name, x.GetNetworkInterfaces()[0].GetNetworkIP()); err != nil {
			return providers.Replica{}, fmt.Errorf("recreate replica %s: keep its internal address: %w", name, err)
		}
		sip, _, _ := in.p.staticAddress(ctx)
		for _, ac := range x.GetNetworkInterfaces()[0].GetAccessConfigs() {
			if sip != "" && ac.GetNatIP() == sip {
				natIP = sip
			}
		}
		if err := in.deleteInstance(ctx, name, zone); err != nil {
			return providers.Replica{}, fmt.Errorf("recreate replica %s: %w", name, err)
		}
	case errors.Is(err, errkind.NotFound):
		if zone, err = in.findDataDisk(ctx, name); err != nil {
			return providers.Replica{}, err
		}
		if zone == "" {
			return providers.Replica{}, errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s (no instance, no data disk)", name, in.p.cluster)
		}
	default:
		return providers.Replica{}, err
	}
	addr, err := in.ReserveAddress(ctx, name, zone)
	if err != nil {
		return providers.Replica{}, err
	}
	if err := in.insert(ctx, name, zone, tmpl, docs, addr, natIP); err != nil {
		return providers.Replica{}, fmt.Errorf("recreate replica %s: %w", name, err)
	}
	return in.getVisible(ctx, name)
}

// getVisible is Get after an insert: it waits out eventual consistency.
func (in *instances) getVisible(ctx context.Context, name string) (providers.Replica, error) {
	var r providers.Replica
	err := in.p.visible(ctx, "instance "+name, func(ctx context.Context) error {
		var err error
		r, err = in.Get(ctx, name)
		return err
	})
	return r, err
}

func (in *instances) deleteInstance(ctx context.Context, name, zone string) error {
	err := in.p.mutate(ctx, "delete instance "+name, func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return in.p.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: in.p.project, Zone: zone, Instance: name, RequestId: rid})
	})
	in.p.mu.Lock()
	for k := range in.p.diskInfo {
		if strings.HasSuffix(k, "/disks/"+name) {
			delete(in.p.diskInfo, k) // the boot disk goes with the instance
		}
	}
	in.p.mu.Unlock()
	return ignore(err, errkind.NotFound)
}

// Delete implements providers.Instances: the instance (boot disk
// auto-deleted), its data disk and its address. Absent is success.
func (in *instances) Delete(ctx context.Context, name string) error {
	_, zone, err := in.getRaw(ctx, name)
	switch {
	case err == nil:
		if err := in.deleteInstance(ctx, name, zone); err != nil {
			return err
		}
	case errors.Is(err, errkind.NotFound):
		if zone, err = in.findDataDisk(ctx, name); err != nil {
			return err
		}
	default:
		return err
	}
	if zone != "" {
		dn := dataDiskName(name)
		err := in.p.mutate(ctx, "delete data disk "+dn, func(ctx context.Context, rid *string) (*compute.Operation, error) {
			return in.p.disks.Delete(ctx, &computepb.DeleteDiskRequest{Project: in.p.project, Zone: zone, Disk: dn, RequestId: rid})
		})
		if err := ignore(err, errkind.NotFound); err != nil {
			return err
		}
	}
	in.p.mu.Lock()
	delete(in.p.zoneOf, name)
	in.p.mu.Unlock()
	return in.ReleaseAddress(ctx, name)
}

// optional is a proto optional string, nil for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return proto.String(s)
}

// encode writes tmpl's metadata items in the cluster's master format.
func (in *instances) encode(ctx context.Context, tmpl providers.Template) (map[string]string, error) {
	f, err := in.p.TemplateFormat(Name)
	if err != nil {
		return nil, err
	}
	return f.Encode(ctx, tmpl)
}
