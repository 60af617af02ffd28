package awstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
)

// VMs plays EC2's and ELBv2's data plane for one cluster: it polls moto
// (directly, not through the proxy) and keeps one hamaster-node replica
// process per running instance whose data volume is attached, the Elastic
// IP bound on the node of the instance it is associated with, and a
// hamaster-node lb process while the cluster's NLB has a listener and was
// handed the Elastic IP (as the proxy recorded: moto ignores it).
type VMs struct {
	cluster string
	root    string
	bin     string
	caFile  string
	toNet   func(string) string
	ec2     *ec2.Client
	elb     *elb.Client
	proxy   *Proxy

	mu    sync.Mutex
	nodes map[string]*proc  // instance ID → replica process
	zones map[string]string // instance ID → availability zone
	// unbootable: instances whose user data is not hamaster's layout
	// (a kube-up master's): no node is started for them.
	unbootable map[string]bool
	lb         *proc
	lbCfg      lbproxy.Config
	lastErr    error

	stop chan struct{}
	done chan struct{}
}

// errUnbootable: the instance's user data is not hamaster's layout.
var errUnbootable = errors.New("user data the data plane does not boot")

// proc is one data-plane process and what it stands for.
type proc struct {
	*vm.Process
	name, dir, volume, static string
}

func startProc(dir, logName, bin string, args ...string) (*proc, error) {
	p, err := vm.Start(bin, args, filepath.Join(dir, logName))
	if err != nil {
		return nil, err
	}
	return &proc{Process: p, dir: dir}, nil
}

func (v *VMs) start() {
	go func() {
		defer close(v.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := v.reconcile(ctx)
			cancel()
			v.mu.Lock()
			v.lastErr = err
			v.mu.Unlock()
			select {
			case <-v.stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// Close stops the loop and every process it started.
func (v *VMs) Close() {
	close(v.stop)
	<-v.done
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lb != nil {
		v.lb.Stop()
	}
	var wg sync.WaitGroup
	for _, n := range v.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop() }()
	}
	wg.Wait()
}

// LastError is the last reconcile error (for test failure messages).
func (v *VMs) LastError() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}

// Nodes returns the names of the replica processes running now.
func (v *VMs) Nodes() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, n := range v.nodes {
		if n.Running() {
			out = append(out, n.name)
		}
	}
	sort.Strings(out)
	return out
}

// NodeStatus reads the status of the replica process named name.
func (v *VMs) NodeStatus(name string) (nodeapi.Status, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.nodes {
		if n.name == name && n.Running() {
			st, err := nodeapi.ReadStatus(filepath.Join(n.dir, "status.json"))
			return st, err == nil
		}
	}
	return nodeapi.Status{}, false
}

// LBRunning reports whether the load balancer process runs.
func (v *VMs) LBRunning() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lb != nil && v.lb.Running()
}

// Zone is the availability zone of an instance the data plane has seen
// ("" when not yet seen): the proxy's source of targets' zones.
func (v *VMs) Zone(id string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.zones[id]
}

// Health is the proxy's source of target health: the lb process's own
// checks at the target group's (scaled) interval with its healthy
// threshold: "initial" until the threshold's passing checks, "unhealthy"
// after a failed one while not healthy.
func (v *VMs) Health(id string) (string, string, string) {
	v.mu.Lock()
	lbp := v.lb
	v.mu.Unlock()
	if lbp == nil || !lbp.Running() {
		return "initial", "Elb.RegistrationInProgress", "Target registration is in progress"
	}
	st, err := lbproxy.ReadStatus(filepath.Join(v.root, "lb", "status.json"))
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

type observed struct {
	instances map[string]ec2types.Instance // running, with data volume attached
	volumeOf  map[string]string
	eipIP     string
	eipAlloc  string
	eipHolder string
	lbTargets []string // registered instance IDs in a zone the LB covers
	draining  []string // deregistered instance IDs still draining
	lbPort    int32
	lbListen  string // the data plane's address the NLB serves on
	lbOK      bool
	tg        TargetGroupView
}

func (v *VMs) observe(ctx context.Context) (observed, error) {
	o := observed{instances: map[string]ec2types.Instance{}, volumeOf: map[string]string{}}
	vols, err := v.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagCluster), Values: []string{v.cluster}}}})
	if err != nil {
		return o, err
	}
	for _, vol := range vols.Volumes {
		for _, a := range vol.Attachments {
			if a.State == ec2types.VolumeAttachmentStateAttached {
				o.volumeOf[aws.ToString(a.InstanceId)] = aws.ToString(vol.VolumeId)
			}
		}
	}
	is, err := v.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagCluster), Values: []string{v.cluster}}, {Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
	if err != nil {
		return o, err
	}
	for _, r := range is.Reservations {
		for _, i := range r.Instances {
			if o.volumeOf[aws.ToString(i.InstanceId)] != "" {
				o.instances[aws.ToString(i.InstanceId)] = i
			}
		}
	}
	as, err := v.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagCluster), Values: []string{v.cluster}}}})
	if err != nil {
		return o, err
	}
	if len(as.Addresses) == 1 {
		a := as.Addresses[0]
		o.eipIP, o.eipAlloc, o.eipHolder = aws.ToString(a.PublicIp), aws.ToString(a.AllocationId), aws.ToString(a.InstanceId)
	}
	name := awsp.LoadBalancerName(v.cluster)
	lbs, err := v.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
	if err != nil || len(lbs.LoadBalancers) == 0 {
		return o, nil // no load balancer
	}
	// What moto ignores, the proxy's NLB model keeps: is the LB active, was
	// the Elastic IP handed over, which zones does it cover?
	view, ok := v.proxy.LoadBalancer(name)
	if !ok || !view.Active || len(view.TargetGroups) == 0 {
		return o, nil
	}
	switch {
	case slices.Contains(view.Allocations, o.eipAlloc):
		o.lbListen = v.toNet(o.eipIP) // the Elastic IP handed over
	case len(view.Allocations) == 0 && len(view.Addresses) > 0:
		o.lbListen = v.toNet(view.Addresses[0]) // an AWS-assigned address
	default:
		return o, nil
	}
	ls, err := v.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lbs.LoadBalancers[0].LoadBalancerArn})
	if err != nil || len(ls.Listeners) == 0 || len(ls.Listeners[0].DefaultActions) == 0 {
		return o, nil
	}
	o.lbPort = aws.ToInt32(ls.Listeners[0].Port)
	tg := ls.Listeners[0].DefaultActions[0].TargetGroupArn
	for _, t := range view.TargetGroups {
		if t.ARN == aws.ToString(tg) {
			o.tg = t
		}
	}
	if o.tg.ARN == "" {
		return o, nil
	}
	th, err := v.elb.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tg})
	if err != nil {
		return o, nil
	}
	for _, d := range th.TargetHealthDescriptions {
		id := aws.ToString(d.Target.Id)
		i, ok := o.instances[id]
		if !ok || i.Placement == nil || !slices.Contains(view.Zones, aws.ToString(i.Placement.AvailabilityZone)) {
			continue // unused: the NLB does not route to a zone it is not enabled in
		}
		if d.TargetHealth != nil && d.TargetHealth.State == "healthy" { // moto: "healthy" = registered
			o.lbTargets = append(o.lbTargets, id)
		}
	}
	sort.Strings(o.lbTargets)
	o.draining = o.tg.Draining
	o.lbOK = true
	return o, nil
}

func (v *VMs) reconcile(ctx context.Context) error {
	o, err := v.observe(ctx)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, i := range o.instances {
		if i.Placement != nil {
			v.zones[id] = aws.ToString(i.Placement.AvailabilityZone)
		}
	}
	// 1. Stop what must not run: nodes of gone instances, the LB.
	for id, n := range v.nodes {
		if _, ok := o.instances[id]; !ok || !n.Running() {
			n.Stop()
			delete(v.nodes, id)
		}
	}
	if v.lb != nil && (!o.lbOK || !v.lb.Running()) {
		v.lb.Stop()
		v.lb = nil
	}
	// 2. The Elastic IP on the node of the instance it is associated with.
	eip := ""
	if o.eipIP != "" {
		eip = v.toNet(o.eipIP)
	}
	for id, n := range v.nodes {
		want := ""
		if id == o.eipHolder {
			want = eip
		}
		if n.static != want {
			if err := os.WriteFile(filepath.Join(n.dir, "static-ip"), []byte(want), 0o600); err != nil {
				return err
			}
			n.Signal(syscall.SIGHUP)
			n.static = want
		}
	}
	// 3. Start nodes of new instances.
	for id, i := range o.instances {
		if _, ok := v.nodes[id]; ok || v.unbootable[id] {
			continue
		}
		n, err := v.startNode(ctx, i, o.volumeOf[id], id == o.eipHolder, eip)
		if errors.Is(err, errUnbootable) {
			v.unbootable[id] = true
			continue
		}
		if err != nil {
			return fmt.Errorf("start node for %s: %w", id, err)
		}
		v.nodes[id] = n
	}
	// 4. The load balancer process.
	if !o.lbOK {
		return nil
	}
	hcPath := "/"
	if o.tg.Protocol == "HTTPS" || o.tg.Protocol == "HTTP" {
		hcPath = o.tg.Path
	}
	cfg := lbproxy.Config{
		Listen: net.JoinHostPort(o.lbListen, strconv.Itoa(int(o.lbPort))),
		// The target group's checks, at its (scaled) interval and
		// thresholds: a new target is healthy only after HealthyThreshold
		// passing checks, as on AWS.
		Health: lbproxy.HealthConfig{Path: hcPath, Interval: lbproxy.Duration{Duration: o.tg.Interval}, Timeout: lbproxy.Duration{Duration: min(o.tg.Interval, time.Second)},
			HealthyThreshold: o.tg.Healthy, UnhealthyThreshold: o.tg.Unhealthy, CAFile: v.caFile},
		NoDialRetry: true,
		// A target leaves the config at the end of its (scaled)
		// deregistration delay: with connection termination on, its open
		// connections are closed then, as the NLB does.
		TerminateRemoved: o.tg.ConnTermination,
		StatusFile:       filepath.Join(v.root, "lb", "status.json"),
		PIDFile:          filepath.Join(v.root, "lb", "lb.pid"),
	}
	add := func(id string, draining bool) {
		if i, ok := o.instances[id]; ok {
			cfg.Targets = append(cfg.Targets, lbproxy.Target{Name: id, Address: net.JoinHostPort(v.toNet(aws.ToString(i.PrivateIpAddress)), strconv.Itoa(providers.APIServerPort)), Draining: draining})
		}
	}
	for _, id := range o.lbTargets {
		add(id, false)
	}
	for _, id := range o.draining {
		if !slices.Contains(o.lbTargets, id) {
			add(id, true)
		}
	}
	path := filepath.Join(v.root, "lb", "config.json")
	changed := !slices.Equal(cfg.Targets, v.lbCfg.Targets) || cfg.Listen != v.lbCfg.Listen || cfg.Health != v.lbCfg.Health || cfg.TerminateRemoved != v.lbCfg.TerminateRemoved
	if changed || v.lb == nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := lbproxy.WriteConfig(path, cfg); err != nil {
			return err
		}
		v.lbCfg = cfg
	}
	if v.lb == nil {
		for _, n := range v.nodes {
			if n.static == o.lbListen && o.lbListen != "" {
				return nil // a node still holds the address
			}
		}
		p, err := startProc(filepath.Dir(path), "lb.log", v.bin, "lb", "--config", path)
		if err != nil {
			return err
		}
		v.lb = p
	} else if changed {
		v.lb.Signal(syscall.SIGHUP)
	}
	return nil
}

func (v *VMs) startNode(ctx context.Context, i ec2types.Instance, vol string, holder bool, eip string) (*proc, error) {
	id := aws.ToString(i.InstanceId)
	attr, err := v.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		return nil, err
	}
	ud, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(ud, []byte("MIME-Version:")) {
		return nil, errUnbootable
	}
	tmpl, err := awsp.DecodeUserData(ud)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(v.root, "instances", id)
	name := ""
	for _, t := range i.Tags {
		if aws.ToString(t.Key) == awsp.TagName {
			name = aws.ToString(t.Value)
		}
	}
	static := ""
	if holder {
		static = eip
	}
	layout := vm.Layout{Dir: dir, DataDir: filepath.Join(v.root, "volumes", vol)}
	envPath, err := vm.Prepare(layout, name, v.toNet(aws.ToString(i.PrivateIpAddress)), tmpl)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(layout.StaticIPFile(), []byte(static), 0o600); err != nil {
		return nil, err
	}
	p, err := startProc(dir, "node.log", v.bin, "replica", "--env-file", envPath)
	if err != nil {
		return nil, err
	}
	p.name, p.volume, p.static = name, vol, static
	return p, nil
}
