package gcetest_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers/gce/gcetest"
)

// sshDial connects to addr:22 as the cluster's SSH user, checking the host
// key against the fake's known_hosts.
func sshDial(t *testing.T, c *gcetest.KubeUpCluster, addr string) (*ssh.Client, error) {
	t.Helper()
	b, err := os.ReadFile(c.SSHKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := knownhosts.New(c.KnownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", net.JoinHostPort(addr, "22"), &ssh.ClientConfig{User: c.SSHUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hk, Timeout: 5 * time.Second})
}

// etcdMembers lists a cluster's member names through an SSH tunnel to
// 127.0.0.1:port inside the master, as the operator reaches etcd.
func etcdMembers(ctx context.Context, t *testing.T, c *gcetest.KubeUpCluster, sc *ssh.Client, port string, tlsOn bool) []string {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{"http://127.0.0.1:" + port}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(_ context.Context, addr string) (net.Conn, error) { return sc.Dial("tcp", addr) })}}
	if tlsOn {
		// The apiserver's client material: signed by ETCD_APISERVER_CA.
		pair, err := c.Master.Metadata.EtcdClientCA.IssueClient("operator", nil, certs.ECDSA)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pair.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Endpoints = []string{"https://127.0.0.1:" + port}
		cfg.TLS = &tls.Config{RootCAs: c.Master.Metadata.EtcdClientCA.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list on :%s through SSH: %v", port, err)
	}
	var names []string
	for _, m := range resp.Members {
		names = append(names, m.Name)
	}
	return names
}

func TestUpKubeUpMaster0(t *testing.T) {
	start := time.Now()
	c := gcetest.UpKubeUp(t, "kubernetes", gcetest.KubeUpOptions{})
	t.Logf("master 0 ready on %s:443 after %v", c.StaticIP, time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := c.Master
	if m.Name != "kubernetes-master" {
		t.Fatalf("master name %q", m.Name)
	}

	// What create-master made, seen through the API.
	for _, r := range []struct{ coll, name string }{
		{"addresses", "kubernetes-master-ip"}, {"disks", "kubernetes-master-pd"}, {"instances", "kubernetes-master"},
		{"firewalls", "kubernetes-master-https"}, {"firewalls", "kubernetes-master-etcd"},
	} {
		if c.Fake.Resource(r.coll, r.name) == nil {
			t.Errorf("no %s %s", r.coll, r.name)
		}
	}
	in := c.Fake.Resource("instances", m.Name)
	nic := in["networkInterfaces"].([]any)[0].(map[string]any)
	internal := netip.MustParseAddr(nic["networkIP"].(string))
	if !netip.MustParsePrefix("10.128.0.0/20").Contains(internal) {
		t.Errorf("internal address %v is not from the subnetwork's range", internal)
	}
	nat := nic["accessConfigs"].([]any)[0].(map[string]any)["natIP"]
	if nat != c.StaticIP {
		t.Errorf("access config natIP %v, want the static IP %s", nat, c.StaticIP)
	}
	var dataDisk bool
	for _, d := range in["disks"].([]any) {
		d := d.(map[string]any)
		dataDisk = dataDisk || d["deviceName"] == "master-pd" && strings.HasSuffix(d["source"].(string), "/disks/kubernetes-master-pd")
	}
	if !dataDisk {
		t.Errorf("no kubernetes-master-pd as device master-pd: %v", in["disks"])
	}

	// The operator's namespace routes external addresses into the VPC,
	// never internal ones.
	if ok, r := c.VPC.Routed(netip.MustParseAddr(c.StaticIP)); !ok {
		t.Errorf("static IP not routed into the VPC: %s", r)
	}
	if ok, r := c.VPC.Routed(internal); ok {
		t.Errorf("internal address %v is routed into the VPC: %s", internal, r)
	}

	// SSH on the external address with the fake's known_hosts, then etcd
	// main (mTLS) and events through tunnels to the master's loopback.
	sc, err := sshDial(t, c, c.StaticIP)
	if err != nil {
		t.Fatalf("ssh %s: %v", c.StaticIP, err)
	}
	for _, x := range []struct {
		port string
		tls  bool
	}{{"2379", true}, {"4002", false}} {
		names := etcdMembers(ctx, t, c, sc, x.port, x.tls)
		if len(names) != 1 || !strings.HasPrefix(names[0], "etcd-kubernetes-master") {
			t.Errorf("etcd on :%s members %v, want etcd-kubernetes-master", x.port, names)
		}
	}
	sc.Close()

	// detach-external-ip / attach-external-ip: the static IP leaves
	// master 0, which gets an ephemeral address; known_hosts follows.
	opts := []option.ClientOption{option.WithEndpoint(c.Fake.URL), option.WithoutAuthentication()}
	ic, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	op, err := ic.DeleteAccessConfig(ctx, &computepb.DeleteAccessConfigInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, Instance: m.Name,
		AccessConfig: "external-nat", NetworkInterface: "nic0"})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.KnownHostsFile); strings.Contains(string(b), c.StaticIP+" ") {
		t.Errorf("known_hosts still names the detached static IP:\n%s", b)
	}
	op, err = ic.AddAccessConfig(ctx, &computepb.AddAccessConfigInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, Instance: m.Name,
		NetworkInterface: "nic0", AccessConfigResource: &computepb.AccessConfig{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT")}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := ic.Get(ctx, &computepb.GetInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, Instance: m.Name})
	if err != nil {
		t.Fatal(err)
	}
	eph := got.GetNetworkInterfaces()[0].GetAccessConfigs()[0].GetNatIP()
	if eph == "" || eph == c.StaticIP {
		t.Fatalf("ephemeral address %q", eph)
	}
	if b, _ := os.ReadFile(c.KnownHostsFile); !strings.HasPrefix(string(b), eph+" ") {
		t.Errorf("known_hosts does not name the ephemeral %s:\n%s", eph, b)
	}
	sc, err = sshDial(t, c, eph)
	if err != nil {
		t.Fatalf("ssh %s: %v", eph, err)
	}
	sc.Close()

	// A master whose kube-env is wrong boots, as on GCE, and fails: its
	// serial port output says why.
	bad := m.Name + "-bad"
	op, err = ic.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, InstanceResource: &computepb.Instance{
		Name: proto.String(bad), MachineType: proto.String("zones/" + m.Zone + "/machineTypes/n1-standard-1"),
		Disks:             []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/cos-cloud/global/images/cos")}}},
		NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
		Metadata: &computepb.Metadata{Items: []*computepb.Items{
			{Key: proto.String("kube-env"), Value: proto.String("INITIAL_ETCD_CLUSTER: '" + bad + "'\n")},
			{Key: proto.String("kube-master-certs"), Value: proto.String("")},
		}},
	}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("insert %s: %v (GCE accepts the instance; its boot fails)", bad, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		out := c.Fake.SerialPortOutput(m.Zone, bad)
		if strings.Contains(out, "startup-script exit status") {
			t.Logf("%s serial output ends:\n%s", bad, lastLines(out, 3))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no boot failure in its serial output after 30s:\n%s", bad, out)
		}
		<-tick.C
	}
	t.Logf("done after %v", time.Since(start).Round(time.Millisecond))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
