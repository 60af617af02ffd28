// Package kubeadmmaster creates a kubeadm cluster's master 0 on a Compute
// API (the GCE fake, whose kubeadm images are gcefake.KubeadmOptions)
// through the API's Go client, as an operator does with gcloud for
// kubeadm on GCE, never through the provider under test, and initialises
// it with the real `kubeadm init` over SSH:
//
//   - `gcloud compute addresses create NAME-ip --region`: the regional
//     static IP, master 0's access config and kubeadm's
//     controlPlaneEndpoint;
//   - the firewall rules kubeadm's "Ports and Protocols" page asks for
//     (https://kubernetes.io/docs/reference/networking/ports-and-protocols/):
//     NAME-https tcp:6443 from anywhere, NAME-etcd tcp:2379-2380 between
//     the control-plane VMs (tag NAME);
//   - `gcloud compute ssh`: the operator's key in the project's ssh-keys;
//   - `gcloud compute instances create NAME --image IMAGE --address
//     NAME-ip --tags NAME`: the VM from the kubeadm image.
package kubeadmmaster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
)

// Image is the name of a kubeadm image of version (v1.33.13 →
// ubuntu-2404-kubeadm-v1-33-13): an image an operator built with
// kubeadm's packages installed (the fake's gcefake.KubeadmOptions.Images).
func Image(version string) string {
	return "ubuntu-2404-kubeadm-" + strings.ReplaceAll(version, ".", "-")
}

// Options describe master 0.
type Options struct {
	// Endpoint is the Compute API's base URL (the fake's URL).
	Endpoint, Project, Zone string
	// Name is master 0's name (MASTER_NAME: <cluster>-master).
	Name string
	// Image is the boot disk's image name (Image(version)).
	Image string
	// SSHKeys are lines of the project's ssh-keys metadata
	// ("USER:ssh-ed25519 AAAA... comment").
	SSHKeys []string
}

// Master is the created master 0.
type Master struct {
	Name, Zone, Region string
	// Internal is its address in the VPC; StaticIP (<Name>-ip) its
	// external one.
	Internal, StaticIP string
}

// Create makes master 0 and waits for every operation; nothing is
// initialised (Init).
func Create(ctx context.Context, o Options) (*Master, error) {
	i := strings.LastIndex(o.Zone, "-")
	if o.Endpoint == "" || o.Project == "" || o.Name == "" || o.Image == "" || i <= 0 {
		return nil, fmt.Errorf("kubeadm master: need Endpoint, Project, Name, Image and a zone such as us-central1-b (got %q)", o.Zone)
	}
	m := &Master{Name: o.Name, Zone: o.Zone, Region: o.Zone[:i]}
	opts := []option.ClientOption{option.WithEndpoint(o.Endpoint), option.WithoutAuthentication()}
	addrs, err := compute.NewAddressesRESTClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer addrs.Close()
	fws, err := compute.NewFirewallsRESTClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer fws.Close()
	projects, err := compute.NewProjectsRESTClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer projects.Close()
	insts, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer insts.Close()
	wait := func(what string, op *compute.Operation, err error) error {
		if err == nil {
			err = op.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("kubeadm master: %s: %w", what, err)
		}
		return nil
	}
	op, err := addrs.Insert(ctx, &computepb.InsertAddressRequest{Project: o.Project, Region: m.Region,
		AddressResource: &computepb.Address{Name: proto.String(m.Name + "-ip"), AddressType: proto.String("EXTERNAL")}})
	if err := wait("static IP", op, err); err != nil {
		return nil, err
	}
	a, err := addrs.Get(ctx, &computepb.GetAddressRequest{Project: o.Project, Region: m.Region, Address: m.Name + "-ip"})
	if err != nil {
		return nil, err
	}
	m.StaticIP = a.GetAddress()
	network := "global/networks/default"
	for _, fw := range []*computepb.Firewall{
		{Name: proto.String(m.Name + "-https"), Network: proto.String(network), SourceRanges: []string{"0.0.0.0/0"}, TargetTags: []string{m.Name},
			Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"6443"}}}},
		{Name: proto.String(m.Name + "-etcd"), Network: proto.String(network), SourceTags: []string{m.Name}, TargetTags: []string{m.Name},
			Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"2379-2380"}}}},
	} {
		op, err := fws.Insert(ctx, &computepb.InsertFirewallRequest{Project: o.Project, FirewallResource: fw})
		if err := wait("firewall rule "+fw.GetName(), op, err); err != nil {
			return nil, err
		}
	}
	if len(o.SSHKeys) > 0 {
		pr, err := projects.Get(ctx, &computepb.GetProjectRequest{Project: o.Project})
		if err != nil {
			return nil, err
		}
		md := pr.GetCommonInstanceMetadata()
		if md == nil {
			md = &computepb.Metadata{}
		}
		keys := strings.Join(o.SSHKeys, "\n")
		found := false
		for _, it := range md.Items {
			if it.GetKey() == "ssh-keys" {
				it.Value = proto.String(strings.TrimRight(it.GetValue(), "\n") + "\n" + keys)
				found = true
			}
		}
		if !found {
			md.Items = append(md.Items, &computepb.Items{Key: proto.String("ssh-keys"), Value: proto.String(keys)})
		}
		op, err = projects.SetCommonInstanceMetadata(ctx, &computepb.SetCommonInstanceMetadataProjectRequest{Project: o.Project, MetadataResource: md})
		if err := wait("project ssh-keys", op, err); err != nil {
			return nil, err
		}
	}
	op, err = insts.Insert(ctx, &computepb.InsertInstanceRequest{Project: o.Project, Zone: m.Zone, InstanceResource: &computepb.Instance{
		Name:        proto.String(m.Name),
		MachineType: proto.String("zones/" + m.Zone + "/machineTypes/e2-standard-2"),
		Tags:        &computepb.Tags{Items: []string{m.Name}},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String("projects/" + o.Project + "/global/images/" + o.Image), DiskSizeGb: proto.Int64(50)}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String(network),
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT"), NatIP: proto.String(m.StaticIP)}}}},
	}})
	if err := wait("instance "+m.Name, op, err); err != nil {
		return nil, err
	}
	in, err := insts.Get(ctx, &computepb.GetInstanceRequest{Project: o.Project, Zone: m.Zone, Instance: m.Name})
	if err != nil {
		return nil, err
	}
	m.Internal = in.GetNetworkInterfaces()[0].GetNetworkIP()
	return m, nil
}

// SSH is how the operator reaches the VMs.
type SSH struct {
	User, KeyFile, KnownHostsFile string
	Port                          int
}

// Dial logs in to the VM at external address addr, its host key checked
// against the known_hosts file.
func (s SSH) Dial(ctx context.Context, addr string) (*remote.Client, error) {
	return remote.Dial(ctx, remote.Config{Addr: net.JoinHostPort(addr, strconv.Itoa(s.Port)), User: s.User,
		KeyFile: s.KeyFile, KnownHostsFile: s.KnownHostsFile, KeepaliveInterval: -1})
}

// Init runs the real `kubeadm init --config` on m over SSH to its static
// IP, as an operator would after creating the VM, no preflight check
// ignored (kubeadmhost.InitConfig: m's name and internal address, k's
// version and controlPlaneEndpoint), and returns its output, how long it
// took and /etc/kubernetes/admin.conf.
func Init(ctx context.Context, s SSH, m *Master, k kubeadmhost.Init) (out string, took time.Duration, adminConf []byte, err error) {
	addr, err := netip.ParseAddr(m.Internal)
	if err != nil {
		return "", 0, nil, fmt.Errorf("kubeadm master: %s's internal address %q: %w", m.Name, m.Internal, err)
	}
	cl, err := s.Dial(ctx, m.StaticIP)
	if err != nil {
		return "", 0, nil, fmt.Errorf("kubeadm master: ssh to %s: %w", m.Name, err)
	}
	defer cl.Close()
	if err := cl.Upload(ctx, kubeadmhost.InitConfigPath, []byte(kubeadmhost.InitConfig(m.Name, addr, k)), 0o600); err != nil {
		return "", 0, nil, fmt.Errorf("kubeadm master: kubeadm config on %s: %w", m.Name, err)
	}
	start := time.Now()
	b, stderr, err := cl.Run(ctx, kubeadmhost.InitCommand(k)+" 2>&1")
	took = time.Since(start)
	if err != nil {
		return string(b), took, nil, fmt.Errorf("kubeadm master: kubeadm init on %s (%s): %w: %s\n%s", m.Name, took.Round(time.Second), err, stderr, b)
	}
	conf, stderr, err := cl.Run(ctx, "cat /etc/kubernetes/admin.conf")
	if err != nil {
		return string(b), took, nil, fmt.Errorf("kubeadm master: admin.conf of %s: %w: %s", m.Name, err, stderr)
	}
	return string(b), took, conf, nil
}
