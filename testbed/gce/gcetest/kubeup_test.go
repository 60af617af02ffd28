package gcetest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	gax "github.com/googleapis/gax-go/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
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
	t.Parallel()
	start := time.Now()
	c := gcetest.UpKubeUp(t, "kubernetes", gcetest.KubeUpOptions{})
	t.Logf("master 0 ready on %s:443 after %v", c.StaticIP, time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
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
	insertBad := func() {
		t.Helper()
		op, err := ic.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, InstanceResource: &computepb.Instance{
			Name: proto.String(bad), MachineType: proto.String("zones/" + m.Zone + "/machineTypes/n1-standard-1"),
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/cos-cloud/global/images/cos")}}},
			NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"),
				AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT")}}}},
			Metadata: &computepb.Metadata{Items: []*computepb.Items{
				{Key: proto.String("kube-env"), Value: proto.String("INITIAL_ETCD_CLUSTER: '" + bad + "'\n")},
				{Key: proto.String("kube-master-certs"), Value: proto.String("")},
			}},
		}})
		waitOp(ctx, t, "insert "+bad+" (GCE accepts the instance; its boot fails)", op, err)
	}
	// hostKey is bad's line in known_hosts (its external address and key).
	hostKey := func() string {
		t.Helper()
		got, err := ic.Get(ctx, &computepb.GetInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, Instance: bad})
		if err != nil {
			t.Fatal(err)
		}
		ip := got.GetNetworkInterfaces()[0].GetAccessConfigs()[0].GetNatIP()
		b, _ := os.ReadFile(c.KnownHostsFile)
		for _, l := range strings.Split(string(b), "\n") {
			if addr, key, ok := strings.Cut(l, " "); ok && addr == ip {
				return key
			}
		}
		t.Fatalf("known_hosts has no line for %s's %s:\n%s", bad, ip, b)
		return ""
	}
	insertBad()
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

	// Deleted and made again under the same name, it is a new machine:
	// a new host key, an empty serial port.
	key1 := hostKey()
	dop, err := ic.Delete(ctx, &computepb.DeleteInstanceRequest{Project: c.Fake.Project(), Zone: m.Zone, Instance: bad})
	waitOp(ctx, t, "delete "+bad, dop, err)
	insertBad()
	if key2 := hostKey(); key2 == key1 {
		t.Errorf("%s made again kept its host key %s", bad, key1)
	}
	if out := c.Fake.SerialPortOutput(m.Zone, bad); strings.Count(out, "starting kube-up master") > 1 {
		t.Errorf("the new %s's serial output holds the old one's boot:\n%s", bad, out)
	}
	t.Logf("done after %v", time.Since(start).Round(time.Millisecond))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// waitOp fails the test unless the call and its operation succeed.
func waitOp(ctx context.Context, t *testing.T, what string, op interface {
	Wait(context.Context, ...gax.CallOption) error
}, err error) {
	t.Helper()
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestKubeUpLoadBalancerInVPC promotes the static IP to a load balancer
// the way the provider does (detach it from master 0, forwarding rule on
// it to a health-checked backend service), checks the fake's LB in the
// router namespace honours the probes' firewall rule, then demotes.
func TestKubeUpLoadBalancerInVPC(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := gcetest.UpKubeUp(t, "lbtest", gcetest.KubeUpOptions{})
	t.Logf("master 0 ready after %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	m, p := c.Master, c.Fake.Project()
	opts := []option.ClientOption{option.WithEndpoint(c.Fake.URL), option.WithoutAuthentication()}
	ic, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	hcs, _ := compute.NewRegionHealthChecksRESTClient(ctx, opts...)
	defer hcs.Close()
	igs, _ := compute.NewInstanceGroupsRESTClient(ctx, opts...)
	defer igs.Close()
	bss, _ := compute.NewRegionBackendServicesRESTClient(ctx, opts...)
	defer bss.Close()
	frs, _ := compute.NewForwardingRulesRESTClient(ctx, opts...)
	defer frs.Close()
	fws, _ := compute.NewFirewallsRESTClient(ctx, opts...)
	defer fws.Close()
	link := func(rel string) string { return "projects/" + p + "/" + rel }

	// detach-external-ip, then an ephemeral address for master 0.
	op, err := ic.DeleteAccessConfig(ctx, &computepb.DeleteAccessConfigInstanceRequest{Project: p, Zone: m.Zone, Instance: m.Name, AccessConfig: "external-nat", NetworkInterface: "nic0"})
	waitOp(ctx, t, "detach the static IP", op, err)
	op, err = ic.AddAccessConfig(ctx, &computepb.AddAccessConfigInstanceRequest{Project: p, Zone: m.Zone, Instance: m.Name, NetworkInterface: "nic0",
		AccessConfigResource: &computepb.AccessConfig{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT")}})
	waitOp(ctx, t, "ephemeral address", op, err)

	op, err = hcs.Insert(ctx, &computepb.InsertRegionHealthCheckRequest{Project: p, Region: m.Region, HealthCheckResource: &computepb.HealthCheck{
		Name: proto.String(m.Name + "-hc"), Type: proto.String("HTTPS"), HttpsHealthCheck: &computepb.HTTPSHealthCheck{Port: proto.Int32(443), RequestPath: proto.String("/readyz")},
		CheckIntervalSec: proto.Int32(2), TimeoutSec: proto.Int32(2), HealthyThreshold: proto.Int32(1), UnhealthyThreshold: proto.Int32(2)}})
	waitOp(ctx, t, "health check", op, err)
	group := link("zones/" + m.Zone + "/instanceGroups/" + m.Name)
	op, err = igs.Insert(ctx, &computepb.InsertInstanceGroupRequest{Project: p, Zone: m.Zone, InstanceGroupResource: &computepb.InstanceGroup{Name: proto.String(m.Name)}})
	waitOp(ctx, t, "instance group", op, err)
	op, err = igs.AddInstances(ctx, &computepb.AddInstancesInstanceGroupRequest{Project: p, Zone: m.Zone, InstanceGroup: m.Name,
		InstanceGroupsAddInstancesRequestResource: &computepb.InstanceGroupsAddInstancesRequest{Instances: []*computepb.InstanceReference{{Instance: proto.String(link("zones/" + m.Zone + "/instances/" + m.Name))}}}})
	waitOp(ctx, t, "add master 0 to the group", op, err)
	op, err = bss.Insert(ctx, &computepb.InsertRegionBackendServiceRequest{Project: p, Region: m.Region, BackendServiceResource: &computepb.BackendService{
		Name: proto.String(m.Name), LoadBalancingScheme: proto.String("EXTERNAL"), Protocol: proto.String("TCP"),
		HealthChecks: []string{link("regions/" + m.Region + "/healthChecks/" + m.Name + "-hc")},
		Backends:     []*computepb.Backend{{Group: proto.String(group), BalancingMode: proto.String("CONNECTION")}}}})
	waitOp(ctx, t, "backend service", op, err)
	op, err = frs.Insert(ctx, &computepb.InsertForwardingRuleRequest{Project: p, Region: m.Region, ForwardingRuleResource: &computepb.ForwardingRule{
		Name: proto.String(m.Name), IPAddress: proto.String(c.StaticIP), IPProtocol: proto.String("TCP"), Ports: []string{"443"},
		LoadBalancingScheme: proto.String("EXTERNAL"), BackendService: proto.String(link("regions/" + m.Region + "/backendServices/" + m.Name))}})
	waitOp(ctx, t, "forwarding rule on the static IP", op, err)
	if b, _ := os.ReadFile(c.KnownHostsFile); strings.Contains(string(b), c.StaticIP+" ") {
		t.Errorf("known_hosts names the static IP the LB now holds:\n%s", b)
	}

	health := func() string {
		h, err := bss.GetHealth(ctx, &computepb.GetHealthRegionBackendServiceRequest{Project: p, Region: m.Region, BackendService: m.Name,
			ResourceGroupReferenceResource: &computepb.ResourceGroupReference{Group: proto.String(group)}})
		if err != nil || len(h.GetHealthStatus()) != 1 {
			return fmt.Sprintf("%v %v", h, err)
		}
		return h.GetHealthStatus()[0].GetHealthState()
	}
	// kube-up's MASTER_NAME-https lets 0.0.0.0/0 in on tcp:443, the
	// probes' ranges included (create-master: no --source-ranges).
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	waitHealth := func(want, why string) {
		t.Helper()
		for got := health(); got != want; got = health() {
			if time.Now().After(deadline) {
				t.Fatalf("master 0 not %s 30s after %s: %s", want, why, got)
			}
			<-tick.C
		}
	}
	waitHealth("HEALTHY", "the forwarding rule, kube-up's https rule letting the probes in")
	// An operator who narrowed access to the apiserver drops the probes.
	fop, err := fws.Delete(ctx, &computepb.DeleteFirewallRequest{Project: p, Firewall: m.Name + "-https"})
	waitOp(ctx, t, "delete "+m.Name+"-https", fop, err)
	deadline = time.Now().Add(30 * time.Second)
	waitHealth("UNHEALTHY", "deleting the only rule letting the probes in")
	op, err = fws.Insert(ctx, &computepb.InsertFirewallRequest{Project: p, FirewallResource: &computepb.Firewall{
		Name: proto.String(m.Name + "-lb-health-checks"), Network: proto.String(link("global/networks/default")), SourceRanges: gcefake.HealthCheckRanges,
		TargetTags: []string{m.Tag}, Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"443"}}}}})
	waitOp(ctx, t, "firewall rule for the probes", op, err)
	deadline = time.Now().Add(30 * time.Second)
	waitHealth("HEALTHY", "the probes' rule")
	if err := c.WaitReady(ctx, c.StaticIP, 30*time.Second); err != nil {
		t.Fatalf("through the LB: %v", err)
	}
	t.Logf("the LB serves the static IP after %v", time.Since(start).Round(time.Millisecond))

	// Demotion: the rule goes, the static IP returns to master 0.
	dop, err := frs.Delete(ctx, &computepb.DeleteForwardingRuleRequest{Project: p, Region: m.Region, ForwardingRule: m.Name})
	waitOp(ctx, t, "delete the forwarding rule", dop, err)
	op, err = ic.DeleteAccessConfig(ctx, &computepb.DeleteAccessConfigInstanceRequest{Project: p, Zone: m.Zone, Instance: m.Name, AccessConfig: "external-nat", NetworkInterface: "nic0"})
	waitOp(ctx, t, "drop the ephemeral address", op, err)
	op, err = ic.AddAccessConfig(ctx, &computepb.AddAccessConfigInstanceRequest{Project: p, Zone: m.Zone, Instance: m.Name, NetworkInterface: "nic0",
		AccessConfigResource: &computepb.AccessConfig{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT"), NatIP: proto.String(c.StaticIP)}})
	waitOp(ctx, t, "re-attach the static IP", op, err)
	if err := c.WaitReady(ctx, c.StaticIP, 30*time.Second); err != nil {
		t.Fatalf("master 0 on the static IP again: %v", err)
	}
	sc, err := sshDial(t, c, c.StaticIP)
	if err != nil {
		t.Fatalf("ssh to master 0 on the static IP again: %v", err)
	}
	sc.Close()
	if _, lbs := c.Fake.RunningProcesses(); lbs != 0 {
		t.Errorf("%d LB processes left after the rule's deletion", lbs)
	}
	t.Logf("done after %v", time.Since(start).Round(time.Millisecond))
}

// TestKubeUpAddressesInVPC: internal addresses are reserved from the
// subnetwork's range, external ones from what the VPC routes.
func TestKubeUpAddressesInVPC(t *testing.T) {
	t.Parallel()
	c := gcetest.UpKubeUp(t, "addr", gcetest.KubeUpOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	ac, err := compute.NewAddressesRESTClient(ctx, option.WithEndpoint(c.Fake.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	subnet := netip.MustParsePrefix("10.128.0.0/20")
	external := c.VPC.VPC.External() // vpc.VPC's range, not vpctest's address helper
	for _, tc := range []struct {
		name, typ, addr string
		wantIn          netip.Prefix // "" with wantErr
		wantErr         string
	}{
		{name: "internal-auto", typ: "INTERNAL", wantIn: subnet},
		{name: "internal-given", typ: "INTERNAL", addr: "10.128.3.7", wantIn: netip.MustParsePrefix("10.128.3.7/32")},
		{name: "internal-outside", typ: "INTERNAL", addr: "10.129.0.5", wantErr: "outside the subnetwork"},
		{name: "internal-gateway", typ: "INTERNAL", addr: "10.128.0.1", wantErr: "outside the subnetwork"},
		{name: "external-auto", typ: "EXTERNAL", wantIn: external},
		{name: "external-outside", typ: "EXTERNAL", addr: "203.0.113.9", wantErr: "not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &computepb.Address{Name: proto.String(tc.name), AddressType: proto.String(tc.typ)}
			if tc.addr != "" {
				a.Address = proto.String(tc.addr)
			}
			op, err := ac.Insert(ctx, &computepb.InsertAddressRequest{Project: c.Fake.Project(), Region: c.Master.Region, AddressResource: a})
			if err == nil {
				err = op.Wait(ctx)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := ac.Get(ctx, &computepb.GetAddressRequest{Project: c.Fake.Project(), Region: c.Master.Region, Address: tc.name})
			if err != nil {
				t.Fatal(err)
			}
			ip := netip.MustParseAddr(got.GetAddress())
			if !tc.wantIn.Contains(ip) || ip == tc.wantIn.Addr() && tc.wantIn.Bits() < 32 {
				t.Errorf("address %v, want a host of %v", ip, tc.wantIn)
			}
			if tc.typ == "INTERNAL" && ip == netip.MustParseAddr("10.128.0.1") {
				t.Errorf("got the gateway %v", ip)
			}
		})
	}
}
