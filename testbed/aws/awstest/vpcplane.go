package awstest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/dataplane/node"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/kubeenv"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/vpc"
)

// VPCPlane plays EC2's and ELBv2's data plane in a network-namespace VPC
// (testbed/vpc), the way the GCE fake's VPC mode does
// (testbed/gce/gcefake/vpcplane.go). It polls moto directly (not
// through the proxy) and keeps:
//
//   - one VM namespace per running instance of the EC2 VPC, named by the
//     instance's EC2 hostname ip-a-b-c-d (which every VM resolves: kube-up
//     etcd peer URLs use it) on its private address; the VPC's subnets
//     are ranges of the VPC CIDR, all on the router's bridge, its gateway
//     the CIDR's first host (AWS's VPC router, .1);
//   - in each VM, OpenSSH's sshd on port 22 with its own host key, the
//     instance's EC2 key pair's public key authorized for the image's
//     user (cloud-init's default user: kube-up's jessie image logs in as
//     admin);
//   - in a VM whose user data is kube-up's AWS master format and whose
//     data volume is attached (kube-up attaches it at /dev/sdb after the
//     instance runs; its setup-master-pd waits for /dev/xvdb),
//     `hamaster-node kube-up-master --aws-user-data` with that volume as
//     its disk; its output is the instance's console output
//     (GetConsoleOutput, through the proxy);
//   - the instances' public addresses (Elastic IPs allocated in the VPC's
//     external range, and auto-assigned ones, which the proxy draws from
//     that range: SetPublicPool) routed from the operator's namespace;
//     private addresses are not;
//   - the NLB, while the proxy's model says it is active: a
//     `hamaster-node lb` in the router namespace listening on the Elastic
//     IP handed to it (or the address AWS assigned), checking its targets
//     from inside the VPC as the target group says, forwarding to the
//     registered targets in the zones it covers; a target whose security
//     groups do not let the checks in (tcp/<port> from a CIDR holding the
//     NLB's private address) times out, unhealthy (clients' own
//     addresses are not checked against the groups).
//
// A known_hosts file names every VM's private and public address with its
// host key (what a careful operator collects from the instances' console
// output).
type VPCPlane struct {
	o   VPCPlaneOptions
	ctx context.Context
	end context.CancelFunc

	mu    sync.Mutex
	vms   map[string]*awsVM // instance ID →
	zones map[string]string // instance ID → availability zone
	ext   map[netip.Addr]string
	lb    *vm.Process
	lbCfg lbproxy.Config
	// blocked: targets whose security groups drop the NLB's health
	// checks (they time out, as on AWS).
	blocked map[string]bool
	// downloads: URL → local file of what Publish put there (kube-up's
	// upload-server-tars to the staging S3 bucket); a master's
	// download-or-bust gets these and nothing else.
	downloads map[string]string
	lastErr   error
	known     string

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// VPCPlaneOptions configure a VPCPlane.
type VPCPlaneOptions struct {
	// Net is the namespace VPC: its Subnet is the EC2 VPC's CIDR.
	Net *vpc.VPC
	// VPCID is the EC2 VPC whose instances the plane boots.
	VPCID string
	// Cluster names the NLB (awsp.LoadBalancerName).
	Cluster string
	// Dir holds the VMs' files, volumes and the LB's.
	Dir string
	// NodeBinary is hamaster-node; SSHD OpenSSH's sshd (default
	// /usr/sbin/sshd).
	NodeBinary, SSHD string
	// SSHUser is the image's default user, who gets the key pair's key.
	SSHUser string
	// EC2 and ELB talk to moto directly; Proxy holds the NLB model.
	EC2   *ec2.Client
	ELB   *elb.Client
	Proxy *Proxy
	// ResolveTimeout bounds a master's lookup of its own hostname.
	ResolveTimeout time.Duration
}

// DefaultSSHUser is kube-up's SSH_USER for its AWS jessie image
// (cluster/aws/jessie/util.sh).
const DefaultSSHUser = "admin"

type awsVM struct {
	id, host string
	private  netip.Addr
	ns, dir  string
	hostKey  ssh.PublicKey
	sshd     *vm.Process
	node     *vm.Process
	name     string // the Name tag
	volume   string // the data volume the node runs on
	// kubeUp: the user data is kube-up's AWS master format; else why not.
	kubeUp   bool
	notes    []string
	userData string // file
	caFile   string
}

// NewVPCPlane starts the plane's loop; Close stops it and removes every
// VM.
func NewVPCPlane(o VPCPlaneOptions) *VPCPlane {
	if o.SSHD == "" {
		o.SSHD = "/usr/sbin/sshd"
	}
	if o.SSHUser == "" {
		o.SSHUser = DefaultSSHUser
	}
	if o.ResolveTimeout == 0 {
		o.ResolveTimeout = 20 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &VPCPlane{o: o, ctx: ctx, end: cancel, vms: map[string]*awsVM{}, zones: map[string]string{}, ext: map[netip.Addr]string{}, blocked: map[string]bool{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go v.loop()
	return v
}

// KnownHostsFile is the known_hosts the plane keeps.
func (v *VPCPlane) KnownHostsFile() string { return filepath.Join(v.o.Dir, "known_hosts") }

func (v *VPCPlane) loop() {
	defer close(v.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(v.ctx, 30*time.Second)
		err := v.reconcile(ctx)
		cancel()
		v.mu.Lock()
		v.lastErr = err
		v.mu.Unlock()
		select {
		case <-v.stop:
			return
		case <-tick.C:
		case <-v.kick:
		}
	}
}

// Kick makes the plane look at EC2 again now (it never blocks): the
// proxy kicks it after every call that may change the world.
func (v *VPCPlane) Kick() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

// Close stops the loop, the LB and every VM (their processes and
// namespaces).
func (v *VPCPlane) Close() {
	close(v.stop)
	<-v.done
	v.end()
	v.mu.Lock()
	lbp := v.lb
	v.lb = nil
	ids := make([]string, 0, len(v.vms))
	for id := range v.vms {
		ids = append(ids, id)
	}
	v.mu.Unlock()
	lbp.Stop()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); v.stopVM(id) }()
	}
	wg.Wait()
}

// LastError is the last reconcile error.
func (v *VPCPlane) LastError() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}

// Nodes are the Name tags of the instances whose kube-up master runs.
func (v *VPCPlane) Nodes() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, x := range v.vms {
		if x.node != nil && x.node.Running() {
			out = append(out, x.name)
		}
	}
	sort.Strings(out)
	return out
}

// NodeStatus reads the status of the kube-up master of the instance named
// name.
func (v *VPCPlane) NodeStatus(name string) (nodeapi.Status, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, x := range v.vms {
		if x.name == name && x.node != nil && x.node.Running() {
			st, err := nodeapi.ReadStatus(filepath.Join(x.dir, "status.json"))
			return st, err == nil
		}
	}
	return nodeapi.Status{}, false
}

// LBRunning reports whether the NLB's process runs.
func (v *VPCPlane) LBRunning() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lb != nil && v.lb.Running()
}

// Zone is an instance's zone as the plane last saw it.
func (v *VPCPlane) Zone(id string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.zones[id]
}

// ConsoleOutput is what GetConsoleOutput answers for an instance: the
// boot's notes and its kube-up master's output, and, once that has
// exited, how.
func (v *VPCPlane) ConsoleOutput(id string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	x := v.vms[id]
	if x == nil {
		return "", false
	}
	b, _ := os.ReadFile(filepath.Join(x.dir, "console.log"))
	out := strings.Join(x.notes, "") + string(b)
	if x.node != nil && !x.node.Running() {
		out += "cloud-init: /etc/kubernetes/bootstrap exited: " + x.node.ExitReason() + "\n"
	}
	return out, true
}

// Health is the proxy's source of target health: the NLB process's own
// checks at the target group's (scaled) interval with its healthy
// threshold: "initial" until the threshold's passing checks, "unhealthy"
// after a failed one while not healthy.
func (v *VPCPlane) Health(id string) (string, string, string) {
	v.mu.Lock()
	lbp, blocked := v.lb, v.blocked[id]
	v.mu.Unlock()
	if blocked && lbp != nil {
		return "unhealthy", "Target.Timeout", "Request timed out"
	}
	if lbp == nil || !lbp.Running() {
		return "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
	}
	return healthFromStatus(filepath.Join(v.o.Dir, "lb", "status.json"), id)
}

func healthFromStatus(path, id string) (string, string, string) {
	st, err := lbproxy.ReadStatus(path)
	if err != nil {
		return "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
	}
	t, ok := st.Target(id)
	if !ok || t.LastChecked.IsZero() {
		return "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
	}
	switch {
	case t.Healthy:
		return "healthy", "", ""
	case t.LastError == "":
		return "initial", "Elb.InitialHealthChecking", "Initial health checks in progress"
	}
	return "unhealthy", "Target.FailedHealthChecks", "Health checks failed: " + t.LastError
}

// dataDevices are where a kube-up master's data volume shows up: kube-up
// attaches it as /dev/sdb (util.sh start-master), which HVM instances see
// as /dev/xvdb (setup-master-pd waits for it).
var dataDevices = []string{"/dev/sdb", "/dev/xvdb"}

type vpcObserved struct {
	instances map[string]ec2types.Instance // running, in the VPC
	volumeOf  map[string]string            // instance ID → attached data volume
	lb        lbObserved
	// groups are the VPC's security groups by ID.
	groups map[string]ec2types.SecurityGroup
}

type lbObserved struct {
	ok      bool
	listen  netip.Addr
	port    int32
	tg      TargetGroupView
	targets []lbTarget // registered, in a covered zone, or draining
}

type lbTarget struct {
	id       string
	port     int32
	draining bool
}

func (v *VPCPlane) observe(ctx context.Context) (vpcObserved, error) {
	o := vpcObserved{instances: map[string]ec2types.Instance{}, volumeOf: map[string]string{}}
	is, err := v.o.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("vpc-id"), Values: []string{v.o.VPCID}}, {Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
	if err != nil {
		return o, fmt.Errorf("describe instances: %w", err)
	}
	for _, r := range is.Reservations {
		for _, i := range r.Instances {
			o.instances[aws.ToString(i.InstanceId)] = i
		}
	}
	vols, err := v.o.EC2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil {
		return o, fmt.Errorf("describe volumes: %w", err)
	}
	for _, vol := range vols.Volumes {
		for _, a := range vol.Attachments {
			if a.State == ec2types.VolumeAttachmentStateAttached && slices.Contains(dataDevices, aws.ToString(a.Device)) {
				o.volumeOf[aws.ToString(a.InstanceId)] = aws.ToString(vol.VolumeId)
			}
		}
	}
	o.lb, err = v.observeLB(ctx, o.instances)
	if err != nil || !o.lb.ok {
		return o, err
	}
	sgs, err := v.o.EC2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{{Name: aws.String("vpc-id"), Values: []string{v.o.VPCID}}}})
	if err != nil {
		return o, fmt.Errorf("describe security groups: %w", err)
	}
	o.groups = map[string]ec2types.SecurityGroup{}
	for _, g := range sgs.SecurityGroups {
		o.groups[aws.ToString(g.GroupId)] = g
	}
	return o, nil
}

// admits reports whether instance i's security groups let tcp/port in
// from src (any rule of any of its groups: protocol all or tcp with the
// port in range, from a CIDR holding src).
func admits(i ec2types.Instance, groups map[string]ec2types.SecurityGroup, port int32, src netip.Addr) bool {
	ids := map[string]bool{}
	for _, g := range i.SecurityGroups {
		ids[aws.ToString(g.GroupId)] = true
	}
	for _, ni := range i.NetworkInterfaces {
		for _, g := range ni.Groups {
			ids[aws.ToString(g.GroupId)] = true
		}
	}
	for id := range ids {
		for _, r := range groups[id].IpPermissions {
			proto := aws.ToString(r.IpProtocol)
			if proto != "-1" && !(proto == "tcp" || proto == "6") {
				continue
			}
			if proto != "-1" && (port < aws.ToInt32(r.FromPort) || port > aws.ToInt32(r.ToPort)) {
				continue
			}
			for _, rg := range r.IpRanges {
				if p, err := netip.ParsePrefix(aws.ToString(rg.CidrIp)); err == nil && p.Contains(src) {
					return true
				}
			}
		}
	}
	return false
}

// observeLB reads the NLB as moto and the proxy's model have it: active,
// its address, its listener's target group and the targets it routes to.
func (v *VPCPlane) observeLB(ctx context.Context, instances map[string]ec2types.Instance) (lbObserved, error) {
	var o lbObserved
	name := awsp.LoadBalancerName(v.o.Cluster)
	lbs, err := v.o.ELB.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
	if err != nil || len(lbs.LoadBalancers) == 0 {
		return o, nil // no load balancer
	}
	view, ok := v.o.Proxy.LoadBalancer(name)
	if !ok || !view.Active || len(view.TargetGroups) == 0 {
		return o, nil
	}
	var listen string
	switch {
	case len(view.Allocations) > 0:
		as, err := v.o.EC2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{AllocationIds: view.Allocations[:1]})
		if err != nil || len(as.Addresses) == 0 {
			return o, nil
		}
		if aws.ToString(as.Addresses[0].AssociationId) != "" && aws.ToString(as.Addresses[0].InstanceId) != "" {
			return o, nil // EC2 still has it on an instance: the handover fails there
		}
		listen = aws.ToString(as.Addresses[0].PublicIp)
	case len(view.Addresses) > 0:
		listen = view.Addresses[0]
	default:
		return o, nil
	}
	a, err := netip.ParseAddr(listen)
	if err != nil || !v.o.Net.ExternalUsable(a) {
		return o, fmt.Errorf("the NLB's address %s is outside the VPC's external range %v", listen, v.o.Net.External())
	}
	o.listen = a
	ls, err := v.o.ELB.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lbs.LoadBalancers[0].LoadBalancerArn})
	if err != nil || len(ls.Listeners) == 0 || len(ls.Listeners[0].DefaultActions) == 0 {
		return o, nil
	}
	o.port = aws.ToInt32(ls.Listeners[0].Port)
	tg := aws.ToString(ls.Listeners[0].DefaultActions[0].TargetGroupArn)
	for _, t := range view.TargetGroups {
		if t.ARN == tg {
			o.tg = t
		}
	}
	if o.tg.ARN == "" {
		return o, nil
	}
	th, err := v.o.ELB.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tg)})
	if err != nil {
		return o, nil
	}
	tgPort := o.port
	for _, d := range th.TargetHealthDescriptions {
		id := aws.ToString(d.Target.Id)
		i, ok := instances[id]
		if !ok || i.Placement == nil || !slices.Contains(view.Zones, aws.ToString(i.Placement.AvailabilityZone)) {
			continue // unused: the NLB does not route to a zone it is not enabled in
		}
		if d.TargetHealth != nil && d.TargetHealth.State == "healthy" { // moto: "healthy" = registered
			port := aws.ToInt32(d.Target.Port)
			if port == 0 {
				port = tgPort
			}
			o.targets = append(o.targets, lbTarget{id: id, port: port})
		}
	}
	for _, id := range o.tg.Draining {
		if _, ok := instances[id]; ok && !slices.ContainsFunc(o.targets, func(t lbTarget) bool { return t.id == id }) {
			o.targets = append(o.targets, lbTarget{id: id, port: tgPort, draining: true})
		}
	}
	sort.Slice(o.targets, func(i, j int) bool { return o.targets[i].id < o.targets[j].id })
	o.ok = true
	return o, nil
}

func (v *VPCPlane) reconcile(ctx context.Context) error {
	o, err := v.observe(ctx)
	if err != nil {
		return err
	}
	var errs []error
	v.mu.Lock()
	for id, i := range o.instances {
		if i.Placement != nil {
			v.zones[id] = aws.ToString(i.Placement.AvailabilityZone)
		}
		if x := v.vms[id]; x != nil {
			x.name = nameTag(i) // kube-up tags after run-instances
		}
	}
	var gone []string
	for id := range v.vms {
		if _, ok := o.instances[id]; !ok {
			gone = append(gone, id)
		}
	}
	v.mu.Unlock()
	// 1. Instances no longer running: their VMs go.
	for _, id := range gone {
		v.stopVM(id)
	}
	// 2. New instances boot (namespace, sshd).
	for id, i := range o.instances {
		v.mu.Lock()
		_, ok := v.vms[id]
		v.mu.Unlock()
		if !ok {
			if err := v.bootVM(ctx, i); err != nil {
				errs = append(errs, fmt.Errorf("boot %s: %w", id, err))
			}
		}
	}
	// 3. Kube-up masters follow their data volumes.
	v.mu.Lock()
	var start []*awsVM
	var stopNodes []*awsVM
	for id, x := range v.vms {
		vol := o.volumeOf[id]
		switch {
		case x.node != nil && x.volume != vol:
			stopNodes = append(stopNodes, x) // its disk went away
		case x.node == nil && x.kubeUp && vol != "":
			x.volume = vol
			start = append(start, x)
		}
	}
	v.mu.Unlock()
	for _, x := range stopNodes {
		x.node.Stop()
		v.mu.Lock()
		x.node, x.volume = nil, ""
		x.notes = append(x.notes, "setup-master-pd: the master pd is gone\n")
		v.mu.Unlock()
	}
	for _, x := range start {
		if err := v.startMaster(x); err != nil {
			errs = append(errs, fmt.Errorf("start the kube-up master of %s: %w", x.id, err))
		}
	}
	// 4. External addresses: the instances' public ones, the NLB's.
	want := map[netip.Addr]string{}
	for id, i := range o.instances {
		if a, err := netip.ParseAddr(v.publicIP(i)); err == nil && v.o.Net.ExternalUsable(a) {
			v.mu.Lock()
			if x := v.vms[id]; x != nil {
				want[a] = x.host
			}
			v.mu.Unlock()
		}
	}
	lbOK := o.lb.ok
	if lbOK {
		if _, held := want[o.lb.listen]; held {
			lbOK = false // an instance still holds it
		} else {
			want[o.lb.listen] = ""
		}
	}
	if !lbOK {
		v.mu.Lock()
		lbp := v.lb
		v.lb = nil
		v.mu.Unlock()
		lbp.Stop()
	}
	if err := v.setExternals(want); err != nil {
		errs = append(errs, err)
	}
	if err := v.writeKnownHosts(o.instances); err != nil {
		errs = append(errs, err)
	}
	// 5. The NLB.
	if lbOK {
		if err := v.reconcileLB(o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setExternals gives every external address in want to its holder (a
// VM's hostname, "" the router) and takes the others back.
func (v *VPCPlane) setExternals(want map[netip.Addr]string) error {
	v.mu.Lock()
	cur := maps2(v.ext)
	v.mu.Unlock()
	var errs []error
	for a, h := range cur {
		if w, ok := want[a]; !ok || w != h {
			if err := v.o.Net.ClearExternal(v.ctx, a); err != nil {
				errs = append(errs, err)
				continue
			}
			v.mu.Lock()
			delete(v.ext, a)
			v.mu.Unlock()
		}
	}
	for a, h := range want {
		if ch, ok := cur[a]; ok && ch == h {
			continue
		}
		if err := v.o.Net.SetExternal(v.ctx, a, h); err != nil {
			errs = append(errs, err)
			continue
		}
		v.mu.Lock()
		v.ext[a] = h
		v.mu.Unlock()
	}
	return errors.Join(errs...)
}

func maps2(m map[netip.Addr]string) map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// bootVM makes an instance's namespace and starts its sshd; a kube-up
// master starts once its data volume is attached.
func (v *VPCPlane) bootVM(ctx context.Context, i ec2types.Instance) error {
	id := aws.ToString(i.InstanceId)
	private, err := netip.ParseAddr(aws.ToString(i.PrivateIpAddress))
	if err != nil {
		return fmt.Errorf("private address %q: %w", aws.ToString(i.PrivateIpAddress), err)
	}
	x := &awsVM{id: id, host: awsp.Hostname(private.String()), private: private, dir: filepath.Join(v.o.Dir, "instances", id)}
	x.name = nameTag(i)
	if err := os.MkdirAll(filepath.Join(x.dir, "ssh"), 0o700); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(x.dir, "console.log"))
	if x.hostKey, err = vpc.HostKey(filepath.Join(x.dir, "ssh", "ssh_host_ed25519_key"), "awstest host key"); err != nil {
		return err
	}
	// cloud-init: the key pair's public key for the default user.
	var authorized string
	if kn := aws.ToString(i.KeyName); kn != "" {
		kp, err := v.o.EC2.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{kn}, IncludePublicKey: aws.Bool(true)})
		if err != nil {
			return fmt.Errorf("key pair %s: %w", kn, err)
		}
		if len(kp.KeyPairs) == 1 {
			authorized = aws.ToString(kp.KeyPairs[0].PublicKey)
		}
	}
	attr, err := v.o.EC2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		return fmt.Errorf("user data: %w", err)
	}
	ud, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	if err != nil {
		return fmt.Errorf("user data is not base64: %w", err)
	}
	if env, _, err := node.KubeUpAWSUserData(ud); err == nil {
		x.kubeUp = true
		x.userData = filepath.Join(x.dir, "user-data")
		if err := os.WriteFile(x.userData, ud, 0o600); err != nil {
			return err
		}
		// The NLB checks the masters' HTTPS with their cluster CA.
		if kv, err := kubeenv.Parse(env); err == nil && kv[kubeenv.CACert] != "" {
			if ca, err := kubeenv.DecodeGzipBase64(kubeenv.CACert, kv[kubeenv.CACert]); err == nil {
				x.caFile = filepath.Join(x.dir, "ca.crt")
				if err := os.WriteFile(x.caFile, ca, 0o644); err != nil {
					return err
				}
			}
		}
		x.notes = append(x.notes, "cloud-init: kube-up master user data; setup-master-pd: waiting for /dev/xvdb\n")
	} else if len(ud) > 0 {
		x.notes = append(x.notes, fmt.Sprintf("cloud-init: no kube-up master here: %v\n", err))
	}
	vmh, err := v.o.Net.AddVM(v.ctx, x.host, private)
	if err != nil {
		return err
	}
	x.ns = vmh.NS
	v.mu.Lock()
	v.vms[id] = x
	v.mu.Unlock()
	if err := v.writeSSHAccess(x, authorized); err != nil {
		return err
	}
	return v.startSSHD(x)
}

// writeSSHAccess authorizes the key pair's key for the default user and
// adds that user to the VM's passwd (uid 0: the fake has no sudo).
func (v *VPCPlane) writeSSHAccess(x *awsVM, authorized string) error {
	dir := filepath.Join(x.dir, "ssh", "authorized_keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if authorized != "" {
		if err := os.WriteFile(filepath.Join(dir, v.o.SSHUser), []byte(strings.TrimSpace(authorized)+"\n"), 0o600); err != nil {
			return err
		}
	}
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	pw := string(host)
	if !strings.HasSuffix(pw, "\n") {
		pw += "\n"
	}
	if !strings.Contains("\n"+pw, "\n"+v.o.SSHUser+":") {
		pw += v.o.SSHUser + ":x:0:0:" + v.o.SSHUser + " (cloud-init default user):/root:/bin/sh\n"
	}
	etc := filepath.Join("/etc/netns", x.ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(etc, "passwd"), []byte(pw), 0o644)
}

func (v *VPCPlane) startIn(holder, bin string, args []string, logPath string) (*vm.Process, error) {
	cmd, err := v.o.Net.Command(v.ctx, holder, bin, args...)
	if err != nil {
		return nil, err
	}
	return vm.StartTied(cmd.Path, cmd.Args[1:], logPath)
}

func (v *VPCPlane) startSSHD(x *awsVM) error {
	sshDir := filepath.Join(x.dir, "ssh")
	cfg, err := vpc.WriteSSHDConfig(sshDir, 22)
	if err != nil {
		return err
	}
	logPath := filepath.Join(sshDir, "sshd.log")
	_ = os.Remove(logPath)
	p, err := v.startIn(x.host, v.o.SSHD, []string{"-D", "-e", "-f", cfg}, logPath)
	if err != nil {
		return err
	}
	v.mu.Lock()
	x.sshd = p
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(v.ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !p.Running() {
			return fmt.Errorf("sshd of %s exited: %v\n%s", x.host, p.ExitReason(), p.Tail(10))
		}
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "Server listening on") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sshd of %s does not listen: %w", x.host, ctx.Err())
		case <-tick.C:
		}
	}
}

// Publish makes data downloadable at url by every VM, as kube-up's
// upload-server-tars makes its tarballs (cluster/aws/util.sh: aws s3 sync
// to the staging bucket, put-object-acl public-read): a master's
// download-or-bust of SERVER_BINARY_TAR_URL / KUBE_MANIFESTS_TAR_URL is
// handed the file (hamaster-node kube-up-master --download), since a VM's
// namespace has no route to the operator's side.
func (v *VPCPlane) Publish(url string, data []byte) error {
	dir := filepath.Join(v.o.Dir, "s3")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f := filepath.Join(dir, fmt.Sprintf("%x", sha256.Sum256([]byte(url))))
	if err := os.WriteFile(f, data, 0o600); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.downloads == nil {
		v.downloads = map[string]string{}
	}
	v.downloads[url] = f
	return nil
}

// startMaster starts the instance's kube-up master on its data volume
// (setup-master-pd mounts it at /mnt/master-pd).
func (v *VPCPlane) startMaster(x *awsVM) error {
	disk := filepath.Join(v.o.Dir, "volumes", x.volume)
	if err := os.MkdirAll(disk, 0o700); err != nil {
		return err
	}
	status := filepath.Join(x.dir, "status.json")
	_ = os.Remove(status)
	args := []string{"kube-up-master", "--aws-user-data", x.userData, "--disk", disk, "--hostname", x.host,
		"--status-file", status, "--pid-file", filepath.Join(x.dir, "node.pid"), "--resolve-timeout", v.o.ResolveTimeout.String(),
		"--etcd-unsafe-no-fsync"}
	v.mu.Lock()
	for _, u := range slices.Sorted(maps.Keys(v.downloads)) {
		args = append(args, "--download", u+"="+v.downloads[u])
	}
	v.mu.Unlock()
	p, err := v.startIn(x.host, v.o.NodeBinary, args, filepath.Join(x.dir, "console.log"))
	if err != nil {
		return err
	}
	v.mu.Lock()
	x.node = p
	x.notes = append(x.notes, "setup-master-pd: "+x.volume+" attached as /dev/xvdb, mounted on /mnt/master-pd\n")
	v.mu.Unlock()
	return nil
}

// stopVM stops an instance's processes (sshd's sessions too) and deletes
// its namespace and addresses.
func (v *VPCPlane) stopVM(id string) {
	v.mu.Lock()
	x := v.vms[id]
	delete(v.vms, id)
	var exts []netip.Addr
	if x != nil {
		for a, h := range v.ext {
			if h == x.host {
				exts = append(exts, a)
				delete(v.ext, a)
			}
		}
	}
	v.mu.Unlock()
	if x == nil {
		return
	}
	vpc.StopProcesses(x.node, x.sshd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range exts {
		_ = v.o.Net.ClearExternal(ctx, a)
	}
	_ = v.o.Net.RemoveVM(ctx, x.host)
}

// writeKnownHosts names every VM's private address and public address
// (the one EC2 reports) with its host key.
func (v *VPCPlane) writeKnownHosts(instances map[string]ec2types.Instance) error {
	type vmKey struct {
		id, private string
		key         ssh.PublicKey
	}
	v.mu.Lock()
	keys := make([]vmKey, 0, len(v.vms))
	for id, x := range v.vms {
		keys = append(keys, vmKey{id, x.private.String(), x.hostKey})
	}
	v.mu.Unlock()
	// The proxy's public addresses without v.mu held: the proxy calls
	// Zone (v.mu) while it holds its own lock (a lock-order deadlock
	// that hung the AWS crash matrix in CI).
	var lines []string
	for _, k := range keys {
		names := []string{k.private}
		if pub := v.publicIP(instances[k.id]); pub != "" {
			names = append(names, pub)
		}
		for _, n := range names {
			lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(n)}, k.key))
		}
	}
	sort.Strings(lines)
	text := strings.Join(lines, "\n") + "\n"
	v.mu.Lock()
	same := text == v.known
	v.known = text
	v.mu.Unlock()
	if same {
		return nil
	}
	path := v.KnownHostsFile()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

// reconcileLB runs the NLB's process in the router namespace on its
// address, checking and forwarding to its targets' private addresses.
func (v *VPCPlane) reconcileLB(o vpcObserved) error {
	v.mu.Lock()
	caFile := ""
	for _, x := range v.vms {
		if x.caFile != "" {
			caFile = x.caFile
			break
		}
	}
	v.mu.Unlock()
	hcPath := "/"
	if o.lb.tg.Protocol == "HTTPS" || o.lb.tg.Protocol == "HTTP" {
		hcPath = o.lb.tg.Path
	}
	dir := filepath.Join(v.o.Dir, "lb")
	cfg := lbproxy.Config{
		Listen: net.JoinHostPort(o.lb.listen.String(), strconv.Itoa(int(o.lb.port))),
		Health: lbproxy.HealthConfig{Path: hcPath, Interval: lbproxy.Duration{Duration: o.lb.tg.Interval}, Timeout: lbproxy.Duration{Duration: min(o.lb.tg.Interval, time.Second)},
			HealthyThreshold: o.lb.tg.Healthy, UnhealthyThreshold: o.lb.tg.Unhealthy, CAFile: caFile,
			// kube-up's MASTER_CERT names kubernetes, not each master's
			// private address.
			ServerName: "kubernetes"},
		NoDialRetry:      true,
		TerminateRemoved: o.lb.tg.ConnTermination,
		StatusFile:       filepath.Join(dir, "status.json"),
		PIDFile:          filepath.Join(dir, "lb.pid"),
	}
	// The checks come from the NLB's private address in the VPC (here
	// the router's, the gateway): a target whose security groups drop
	// them is never checked healthy and gets no traffic.
	blocked := map[string]bool{}
	for _, t := range o.lb.targets {
		i := o.instances[t.id]
		if !admits(i, o.groups, t.port, v.o.Net.Gateway()) {
			blocked[t.id] = true
			continue
		}
		cfg.Targets = append(cfg.Targets, lbproxy.Target{Name: t.id, Address: net.JoinHostPort(aws.ToString(i.PrivateIpAddress), strconv.Itoa(int(t.port))), Draining: t.draining})
	}
	path := filepath.Join(dir, "config.json")
	v.mu.Lock()
	v.blocked = blocked
	lbp := v.lb
	changed := !slices.Equal(cfg.Targets, v.lbCfg.Targets) || cfg.Listen != v.lbCfg.Listen || cfg.Health != v.lbCfg.Health || cfg.TerminateRemoved != v.lbCfg.TerminateRemoved
	v.mu.Unlock()
	if changed || lbp == nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := lbproxy.WriteConfig(path, cfg); err != nil {
			return err
		}
		v.mu.Lock()
		v.lbCfg = cfg
		v.mu.Unlock()
	}
	switch {
	case lbp != nil && !lbp.Running():
		v.mu.Lock()
		v.lb = nil
		v.mu.Unlock()
		return fmt.Errorf("the NLB's process exited: %s\n%s", lbp.ExitReason(), lbp.Tail(10))
	case lbp == nil:
		p, err := v.startIn("", v.o.NodeBinary, []string{"lb", "--config", path}, filepath.Join(dir, "lb.log"))
		if err != nil {
			return err
		}
		v.mu.Lock()
		v.lb = p
		v.mu.Unlock()
	case changed:
		lbp.Signal(syscall.SIGHUP)
	}
	return nil
}

// Describe is every VM's state and console output's tail, for failure
// messages.
func (v *VPCPlane) Describe() string {
	v.mu.Lock()
	ids := make([]string, 0, len(v.vms))
	for id := range v.vms {
		ids = append(ids, id)
	}
	v.mu.Unlock()
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		out, _ := v.ConsoleOutput(id)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		v.mu.Lock()
		x := v.vms[id]
		fmt.Fprintf(&b, "--- %s %s (%s) %s volume %q\n", id, x.name, x.host, x.private, x.volume)
		v.mu.Unlock()
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	return b.String()
}

func nameTag(i ec2types.Instance) string {
	for _, t := range i.Tags {
		if aws.ToString(t.Key) == awsp.TagName {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// publicIP is an instance's public address as the proxy reports it (moto's
// auto-assigned ones mapped into the VPC's external range).
func (v *VPCPlane) publicIP(i ec2types.Instance) string {
	return v.o.Proxy.PublicIP(aws.ToString(i.PublicIpAddress))
}
