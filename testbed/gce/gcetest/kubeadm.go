package gcetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeadmmaster"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
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
// (kubeadmmaster.Image).
func KubeadmImage(version string) string { return kubeadmmaster.Image(version) }

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
	// cluster (UpKubeUp), with --flavor kubeadm.
	Settings providers.Settings
	// SSHUser, SSHKeyFile and KnownHostsFile reach the VMs' sshd on
	// port 22 of their external addresses.
	SSHUser, SSHKeyFile, KnownHostsFile string
}

// UpKubeadm needs root (vpctest.Need), starts a VPC and a fake in VPC
// mode whose image KubeadmImage(o.Version) has kubeadm installed
// (gcefake.KubeadmOptions), and creates master 0 through the Compute API
// as an operator does with gcloud for kubeadm on GCE, never through the
// provider under test (kubeadmmaster.Create: the static IP <Master>-ip
// as its access config, firewall rules, the operator's key in the
// project's ssh-keys, the VM from the image). Nothing is initialised: KubeadmInit runs kubeadm
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
	m, err := kubeadmmaster.Create(ctx, kubeadmmaster.Options{Endpoint: fake.URL, Project: fake.Project(), Zone: o.Zone, Name: c.Master,
		Image: image, SSHKeys: []string{authLine}})
	if err != nil {
		t.Fatal(err)
	}
	c.Internal, c.StaticIP = m.Internal, m.StaticIP
	c.Settings = providers.Settings{Cluster: name, StateDir: stateDir, Out: io.Discard, Options: map[string]string{
		gce.OptProject: fake.Project(), gce.OptRegion: Region, gce.OptZones: ZoneA + "," + ZoneB,
		gce.OptEndpoint: fake.URL, gce.OptDNSZone: "example-zone", gce.OptDrainSeconds: "1", gce.OptOpTimeout: "60s",
		gce.OptMasterName: c.Master, remote.OptUser: SSHUser, remote.OptKey: keyFile, remote.OptKnownHosts: c.KnownHostsFile,
		remote.OptPort: fmt.Sprint(gcefake.SSHPort),
	}, Flavor: flavors.Kubeadm}
	fake.AddManagedZone("example-zone", "example.test.")
	return c
}

// SSH is how the operator reaches the VMs.
func (c *KubeadmCluster) SSH() kubeadmmaster.SSH {
	return kubeadmmaster.SSH{User: c.SSHUser, KeyFile: c.SSHKeyFile, KnownHostsFile: c.KnownHostsFile, Port: gcefake.SSHPort}
}

// Dial logs in to the VM at external address addr over SSH as the
// operator (the project's ssh-keys user), its host key checked against
// the fake's known_hosts.
func (c *KubeadmCluster) Dial(ctx context.Context, addr string) (*remote.Client, error) {
	return c.SSH().Dial(ctx, addr)
}

// KubeadmInit runs the real `kubeadm init --config` on master 0 over SSH
// to its static IP (kubeadmmaster.Init) and returns its output and how
// long it took.
func (c *KubeadmCluster) KubeadmInit(ctx context.Context, k kubeadmhost.Init) (string, time.Duration, error) {
	out, took, _, err := kubeadmmaster.Init(ctx, c.SSH(), &kubeadmmaster.Master{Name: c.Master, Zone: c.Zone, Region: Region, Internal: c.Internal, StaticIP: c.StaticIP}, k)
	return out, took, err
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
