package gcetest

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/testbed/vpc/vpctest"
)

// SSHUser is the user whose key UpKubeUp puts in the project's ssh-keys.
const SSHUser = "hamaster"

// KubeUpOptions for UpKubeUp.
type KubeUpOptions struct {
	// Latency is each operation's latency (default 20 ms).
	Latency time.Duration
	// Zone is master 0's zone (default ZoneA); Settings name ZoneA and
	// ZoneB.
	Zone string
	// BootTimeout bounds master 0's boot (default 90 s).
	BootTimeout time.Duration
	// Releases are published on the fake's release mirror, the
	// provider's --gce-release-url (default DefaultReleases).
	Releases []string
}

// DefaultReleases are the versions the fake's release mirror publishes
// unless KubeUpOptions.Releases says otherwise: the upgrade tests' target
// and the conformance suite's.
var DefaultReleases = []string{"v1.31.0", "v1.99.9"}

// KubeUpCluster is master 0 of a kube-up cluster, created as kube-up
// creates it, on a fake whose instances are kube-up masters in a
// namespace VPC.
type KubeUpCluster struct {
	Fake *gcefake.Server
	VPC  *vpctest.VPC
	// Master is master 0: its name, zone, tag, static IP and metadata
	// (the CAs for assertions).
	Master *kubeupmaster.Master
	// Settings point the GCE provider at the fake: endpoint, project,
	// region, zones, master name, SSH user, key, known_hosts and port,
	// DNS zone "example-zone", a 1 s drain.
	Settings providers.Settings
	// StaticIP is MASTER_NAME-ip's address (external: reachable).
	StaticIP string
	// CAPool holds kube-up's cluster CA (CA_CERT), which signed
	// MASTER_CERT: verify https://StaticIP:443 with it.
	CAPool *x509.CertPool
	// SSHUser, SSHKeyFile and KnownHostsFile reach the masters' sshd on
	// port 22 of their external addresses.
	SSHUser, SSHKeyFile, KnownHostsFile string
}

// UpKubeUp needs root (vpctest.Need), starts a VPC and a fake in VPC mode,
// publishes o.Releases on the fake's release mirror (Settings point
// --gce-release-url there), creates master 0 through the fake's REST API
// as kube-up does (kubeupmaster.Create, INSTANCE_PREFIX name, booting
// from its devel upload) and waits until it serves
// /readyz on the static IP. Everything stops when the test ends.
func UpKubeUp(t testing.TB, name string, o KubeUpOptions) *KubeUpCluster {
	t.Helper()
	vpctest.Need(t)
	if o.Latency == 0 {
		o.Latency = 20 * time.Millisecond
	}
	if o.Zone == "" {
		o.Zone = ZoneA
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.BootTimeout+time.Minute)
	defer cancel()
	v := vpctest.New(ctx, t, "g") // its cleanup runs after the fake's
	dir := t.TempDir()
	fake, err := gcefake.New(gcefake.Options{NodeBinary: localtest.NodeBinary(t), Dir: dir,
		VPC: &gcefake.VPCOptions{Net: v.VPC, EtcdUnsafeNoFsync: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	lat := o.Latency
	fake.SetLatency(func(string) time.Duration { return lat })
	fake.AddManagedZone("example-zone", "example.test.")

	if o.Releases == nil {
		o.Releases = DefaultReleases
	}
	for _, v := range o.Releases {
		if err := fake.AddRelease(v, gcefake.ReleaseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	keyFile, authLine, err := kubeupmaster.WriteSSHKey(filepath.Join(stateDir, "ssh"), SSHUser)
	if err != nil {
		t.Fatal(err)
	}
	m, err := kubeupmaster.Create(ctx, kubeupmaster.Options{Endpoint: fake.URL, Project: fake.Project(), Zone: o.Zone, InstancePrefix: name, SSHKeys: []string{authLine}})
	if err != nil {
		t.Fatal(err)
	}
	c := &KubeUpCluster{Fake: fake, VPC: v, Master: m, StaticIP: m.StaticIP, CAPool: m.Metadata.ClusterCA.Pool(),
		SSHUser: SSHUser, SSHKeyFile: keyFile, KnownHostsFile: fake.KnownHostsFile()}
	c.Settings = providers.Settings{Cluster: name, StateDir: stateDir, Out: io.Discard, Options: map[string]string{
		gce.OptProject: fake.Project(), gce.OptRegion: Region, gce.OptZones: ZoneA + "," + ZoneB,
		gce.OptEndpoint: fake.URL, gce.OptDNSZone: "example-zone", gce.OptDrainSeconds: "1", gce.OptOpTimeout: "60s",
		gce.OptMasterName: m.Name, remote.OptUser: SSHUser, remote.OptKey: keyFile, remote.OptKnownHosts: c.KnownHostsFile,
		remote.OptPort: fmt.Sprint(gcefake.SSHPort), gce.OptReleaseURL: fake.ReleaseURL(),
	}}
	if err := c.WaitReady(ctx, m.StaticIP, o.BootTimeout); err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitReady polls https://ip:443/readyz (verified with the cluster CA,
// for ip) until 200; it gives up at once when master 0's boot has
// failed, with its serial port output.
func (c *KubeUpCluster) WaitReady(ctx context.Context, ip string, timeout time.Duration) error {
	return kubeupmaster.WaitReady(ctx, c.CAPool, ip, timeout, func() string {
		out := c.Fake.SerialPortOutput(c.Master.Zone, c.Master.Name)
		if strings.Contains(out, "startup-script exit status") {
			return out
		}
		return ""
	})
}
