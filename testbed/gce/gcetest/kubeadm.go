package gcetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/dataplane/vpc/vpctest"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// KubeadmOptions for UpKubeadm.
type KubeadmOptions struct {
	// Version is the kubeadm image's packages (kubeadm, kubectl, the
	// kubelet).
	Version string
	// Kubelet and BinDir: the hamaster-kubelet program and the real
	// binaries' directory (metallabtest.Kubeadm).
	Kubelet, BinDir string
	// Zone is master 0's zone (default ZoneA); Settings name ZoneA and
	// ZoneB.
	Zone string
	// Latency is each operation's latency (default 20 ms).
	Latency time.Duration
}

// KubeadmImage is the name of the fake's kubeadm image of version
// (v1.33.13 → ubuntu-2404-kubeadm-v1-33-13): an image an operator built
// with kubeadm's packages installed.
func KubeadmImage(version string) string {
	return "ubuntu-2404-kubeadm-" + strings.ReplaceAll(version, ".", "-")
}

// KubeadmCluster is a VM made from a kubeadm image on a fake, to become a
// kubeadm cluster's master 0 (KubeadmInit), and the settings of a GCE
// provider for it.
type KubeadmCluster struct {
	Fake *gcefake.Server
	VPC  *vpctest.VPC
	// Name is the cluster; Master is master 0 (<Name>-master), in Zone,
	// tagged Master, at Internal in the VPC with StaticIP
	// (<Master>-ip) as its external address.
	Name, Master, Zone string
	Internal, StaticIP string
	// Image is the boot disk's image (KubeadmImage(Version)).
	Image, Version string
	// Settings point the GCE provider at the fake, as for a kube-up
	// cluster (UpKubeUp), with --gce-master-format kubeadm.
	Settings providers.Settings
	// SSHUser, SSHKeyFile and KnownHostsFile reach the VMs' sshd on
	// port 22 of their external addresses.
	SSHUser, SSHKeyFile, KnownHostsFile string
}

// UpKubeadm needs root (vpctest.Need), starts a VPC and a fake in VPC
// mode whose image KubeadmImage(o.Version) has kubeadm installed
// (gcefake.KubeadmOptions), and creates master 0 through the Compute API
// as an operator does with gcloud for kubeadm on GCE (never through the
// provider under test): the regional static IP <Master>-ip (`gcloud
// compute addresses create`), the firewall rules kubeadm's "Ports and
// Protocols" page asks for between and to the control-plane VMs
// (<Master>-https tcp:6443 from anywhere, <Master>-etcd tcp:2379-2380
// between them), the operator's key in the project's ssh-keys (`gcloud
// compute ssh`), and the instance from the image with the static IP as
// its access config. Nothing is initialised: KubeadmInit runs kubeadm
// init on it over SSH. Everything stops when the test ends.
func UpKubeadm(t testing.TB, name string, o KubeadmOptions) *KubeadmCluster {
	t.Helper()
	vpctest.Need(t)
	if o.Version == "" || o.Kubelet == "" || o.BinDir == "" {
		t.Fatal("gcetest: UpKubeadm needs Version, Kubelet and BinDir (metallabtest.Kubeadm)")
	}
	if o.Latency == 0 {
		o.Latency = 20 * time.Millisecond
	}
	if o.Zone == "" {
		o.Zone = ZoneA
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var v *vpctest.VPC
	// Last of all (after the fake's and the VPC's cleanups): nothing of
	// the VMs is left running or written outside the test's directories.
	t.Cleanup(func() {
		if pids := processesRunning(o.Kubelet); len(pids) > 0 {
			t.Errorf("kubelet processes left: %v", pids)
		}
		if v == nil {
			return
		}
		if left, _ := filepath.Glob("/etc/netns/hm-" + v.ID + "-*"); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
	v = vpctest.New(ctx, t, "k") // its cleanup runs after the fake's
	dir := t.TempDir()
	image := KubeadmImage(o.Version)
	fake, err := gcefake.New(gcefake.Options{NodeBinary: localtest.NodeBinary(t), Dir: dir,
		VPC: &gcefake.VPCOptions{Net: v.VPC, Kubeadm: &gcefake.KubeadmOptions{
			Images: map[string]string{image: o.Version}, Kubelet: o.Kubelet, BinDir: o.BinDir}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, in := range fake.Names("zones/" + o.Zone + "/instances") {
				log := fake.KubeletLog(o.Zone, in)
				if len(log) > 6000 {
					log = log[len(log)-6000:]
				}
				t.Logf("%s kubelet log (end):\n%s", in, log)
			}
		}
		fake.Close()
	})
	lat := o.Latency
	fake.SetLatency(func(string) time.Duration { return lat })

	c := &KubeadmCluster{Fake: fake, VPC: v, Name: name, Master: MasterName(name), Zone: o.Zone, Image: image, Version: o.Version,
		SSHUser: SSHUser, KnownHostsFile: fake.KnownHostsFile()}
	stateDir := t.TempDir()
	keyFile, authLine, err := kubeupmaster.WriteSSHKey(filepath.Join(stateDir, "ssh"), SSHUser)
	if err != nil {
		t.Fatal(err)
	}
	c.SSHKeyFile = keyFile
	if err := c.create(ctx, fake.URL, fake.Project(), authLine); err != nil {
		t.Fatal(err)
	}
	c.Settings = providers.Settings{Cluster: name, StateDir: stateDir, Out: io.Discard, Options: map[string]string{
		gce.OptProject: fake.Project(), gce.OptRegion: Region, gce.OptZones: ZoneA + "," + ZoneB,
		gce.OptEndpoint: fake.URL, gce.OptDNSZone: "example-zone", gce.OptDrainSeconds: "1", gce.OptOpTimeout: "60s",
		gce.OptMasterName: c.Master, gce.OptSSHUser: SSHUser, gce.OptSSHKey: keyFile, gce.OptSSHKnownHosts: c.KnownHostsFile,
		gce.OptSSHPort: fmt.Sprint(gcefake.SSHPort), gce.OptMasterFormat: gce.MasterFormatKubeadm,
	}}
	fake.AddManagedZone("example-zone", "example.test.")
	return c
}

// create makes master 0 through the Compute API's Go client, as gcloud
// would.
func (c *KubeadmCluster) create(ctx context.Context, endpoint, project, sshKeys string) error {
	opts := []option.ClientOption{option.WithEndpoint(endpoint), option.WithoutAuthentication()}
	addrs, err := compute.NewAddressesRESTClient(ctx, opts...)
	if err != nil {
		return err
	}
	defer addrs.Close()
	fws, err := compute.NewFirewallsRESTClient(ctx, opts...)
	if err != nil {
		return err
	}
	defer fws.Close()
	projects, err := compute.NewProjectsRESTClient(ctx, opts...)
	if err != nil {
		return err
	}
	defer projects.Close()
	insts, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		return err
	}
	defer insts.Close()
	wait := func(what string, op *compute.Operation, err error) error {
		if err == nil {
			err = op.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("gcetest: %s: %w", what, err)
		}
		return nil
	}
	// gcloud compute addresses create <master>-ip --region.
	op, err := addrs.Insert(ctx, &computepb.InsertAddressRequest{Project: project, Region: Region,
		AddressResource: &computepb.Address{Name: proto.String(c.Master + "-ip"), AddressType: proto.String("EXTERNAL")}})
	if err := wait("static IP", op, err); err != nil {
		return err
	}
	a, err := addrs.Get(ctx, &computepb.GetAddressRequest{Project: project, Region: Region, Address: c.Master + "-ip"})
	if err != nil {
		return err
	}
	c.StaticIP = a.GetAddress()
	network := "global/networks/default"
	for _, fw := range []*computepb.Firewall{
		{Name: proto.String(c.Master + "-https"), Network: proto.String(network), SourceRanges: []string{"0.0.0.0/0"}, TargetTags: []string{c.Master},
			Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"6443"}}}},
		{Name: proto.String(c.Master + "-etcd"), Network: proto.String(network), SourceTags: []string{c.Master}, TargetTags: []string{c.Master},
			Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"2379-2380"}}}},
	} {
		op, err := fws.Insert(ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: fw})
		if err := wait("firewall rule "+fw.GetName(), op, err); err != nil {
			return err
		}
	}
	// gcloud compute ssh: the operator's key in the project's ssh-keys.
	pr, err := projects.Get(ctx, &computepb.GetProjectRequest{Project: project})
	if err != nil {
		return err
	}
	md := pr.GetCommonInstanceMetadata()
	if md == nil {
		md = &computepb.Metadata{}
	}
	md.Items = append(md.Items, &computepb.Items{Key: proto.String(gcefake.MetadataSSHKeys), Value: proto.String(sshKeys)})
	op, err = projects.SetCommonInstanceMetadata(ctx, &computepb.SetCommonInstanceMetadataProjectRequest{Project: project, MetadataResource: md})
	if err := wait("project ssh-keys", op, err); err != nil {
		return err
	}
	// gcloud compute instances create <master> --image ... --address <master>-ip --tags <master>.
	op, err = insts.Insert(ctx, &computepb.InsertInstanceRequest{Project: project, Zone: c.Zone, InstanceResource: &computepb.Instance{
		Name:        proto.String(c.Master),
		MachineType: proto.String("zones/" + c.Zone + "/machineTypes/e2-standard-2"),
		Tags:        &computepb.Tags{Items: []string{c.Master}},
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
			SourceImage: proto.String("projects/" + project + "/global/images/" + c.Image), DiskSizeGb: proto.Int64(50)}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String(network),
			AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT"), NatIP: proto.String(c.StaticIP)}}}},
	}})
	if err := wait("instance "+c.Master, op, err); err != nil {
		return err
	}
	in, err := insts.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: c.Zone, Instance: c.Master})
	if err != nil {
		return err
	}
	c.Internal = in.GetNetworkInterfaces()[0].GetNetworkIP()
	return nil
}

// Dial logs in to the VM at external address addr over SSH as the
// operator (the project's ssh-keys user), its host key checked against
// the fake's known_hosts.
func (c *KubeadmCluster) Dial(ctx context.Context, addr string) (*remote.Client, error) {
	return remote.Dial(ctx, remote.Config{Addr: net.JoinHostPort(addr, fmt.Sprint(gcefake.SSHPort)), User: c.SSHUser,
		KeyFile: c.SSHKeyFile, KnownHostsFile: c.KnownHostsFile, KeepaliveInterval: -1})
}

// KubeadmInit runs the real `kubeadm init --config` on master 0 over SSH
// to its static IP, as an operator would after creating the VM, no
// preflight check ignored (kubeadmhost.InitConfig: master 0's name and
// internal address, k's version and controlPlaneEndpoint), and returns
// its output and how long it took.
func (c *KubeadmCluster) KubeadmInit(ctx context.Context, k kubeadmhost.Init) (string, time.Duration, error) {
	addr, err := netip.ParseAddr(c.Internal)
	if err != nil {
		return "", 0, fmt.Errorf("gcetest: master 0's internal address %q: %w", c.Internal, err)
	}
	cl, err := c.Dial(ctx, c.StaticIP)
	if err != nil {
		return "", 0, fmt.Errorf("gcetest: ssh to %s: %w", c.Master, err)
	}
	defer cl.Close()
	if err := cl.Upload(ctx, kubeadmhost.InitConfigPath, []byte(kubeadmhost.InitConfig(c.Master, addr, k)), 0o600); err != nil {
		return "", 0, fmt.Errorf("gcetest: kubeadm config on %s: %w", c.Master, err)
	}
	start := time.Now()
	out, stderr, err := cl.Run(ctx, kubeadmhost.InitCommand(k)+" 2>&1")
	took := time.Since(start)
	if err != nil {
		return string(out), took, fmt.Errorf("gcetest: kubeadm init on %s (%s): %w: %s\n%s", c.Master, took.Round(time.Second), err, stderr, out)
	}
	return string(out), took, nil
}

// processesRunning lists the processes whose command line names path.
func processesRunning(path string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), path) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
