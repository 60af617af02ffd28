package workflows

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// ReplicaStatus is one replica as status reports it.
type ReplicaStatus struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Version string `json:"version"`
	Healthy bool   `json:"healthy"`
	State   string `json:"state"`
	Error   string `json:"error,omitempty"`
}

// CertStatus is a replica's apiserver serving certificate.
type CertStatus struct {
	Replica  string    `json:"replica"`
	DNSNames []string  `json:"dns_names"`
	IPs      []string  `json:"ips"`
	NotAfter time.Time `json:"not_after"`
	SHA256   string    `json:"sha256"`
	// Problem says why it must be renewed (a SAN of the endpoint missing,
	// expiring within 30 days); "" when fine. 'hamaster rotate-certs'
	// renews it.
	Problem string `json:"problem,omitempty"`
}

// Report is the cluster's status.
type Report struct {
	Cluster  string `json:"cluster"`
	Provider string `json:"provider"`
	// Flavor is what the masters are (flavors: hamaster, kubeadm, kubeup).
	Flavor   string `json:"flavor"`
	Endpoint string `json:"endpoint"`
	// EndpointKind is ip (the static IP on a replica), lb, dns, or
	// replica (a single master reached at its own address: its provider's
	// static IP is served only by a load balancer, none yet; metal).
	EndpointKind   string              `json:"endpoint_kind"`
	StaticIP       string              `json:"static_ip"`
	StaticIPHolder string              `json:"static_ip_attached_to,omitempty"`
	DNSName        string              `json:"dns_name,omitempty"`
	Replicas       []ReplicaStatus     `json:"replicas"`
	Members        []etcdmember.Member `json:"-"`
	MembersError   string              `json:"members_error,omitempty"`
	LB             *lb.Status          `json:"-"`
	Certificates   []CertStatus        `json:"certificates"`
	Journal        *Journal            `json:"-"`
	// EndpointError is why the endpoint (static IP or LB, /readyz with
	// the cluster CA, verified for the DNS name) did not answer; "" when
	// it did.
	EndpointError string `json:"endpoint_error,omitempty"`
	// Orphans are etcd members no replica owns, each with the command that
	// removes it.
	Orphans []Orphan `json:"orphans,omitempty"`
	// View is the flavor's own view of the masters when it keeps one
	// (flavors.Viewer: kubeadm's Nodes, static pods and certificates),
	// shown beside etcd's and the load balancer's; nil otherwise, or
	// when it could not be read (ViewError says why).
	View      *flavors.View `json:"-"`
	ViewError string        `json:"-"`
}

// Healthy reports whether every replica is ready and every voter healthy.
func (r Report) Healthy() bool {
	if r.MembersError != "" || len(r.Replicas) == 0 || r.EndpointError != "" || len(r.Orphans) > 0 {
		return false
	}
	if r.LB != nil && len(r.LB.Holders()) > 1 {
		return false // a split brain: two masters answer for the VIP
	}
	for _, rep := range r.Replicas {
		if !rep.Healthy {
			return false
		}
	}
	leader := false
	for _, m := range r.Members {
		if !m.Learner && !m.Healthy {
			return false
		}
		leader = leader || m.Leader
	}
	return leader
}

// Status gathers the cluster's state; it never changes anything and takes
// no lock. Parts that cannot be read are reported, not fatal.
func Status(ctx context.Context, d *Deps) (Report, error) {
	if err := d.checkBound(); err != nil {
		return Report{Cluster: d.Cluster}, err
	}
	p := d.Provider
	rep := Report{Cluster: d.Cluster, Provider: p.Name(), Flavor: d.Flavor().Name()}
	rs, err := p.Instances().List(ctx)
	if err != nil {
		return rep, err
	}
	ip, holder, err := p.StaticIP().Get(ctx)
	if err != nil {
		return rep, err
	}
	rep.StaticIP, rep.StaticIPHolder = ip, holder
	if err := endpointStatus(ctx, d, &rep, rs); err != nil {
		return rep, err
	}
	rep.Replicas = make([]ReplicaStatus, len(rs))
	// The probes' client first, bounded by ctx alone: the CA the masters
	// carry is read over SSH (and the provider's hosts listed), which the
	// probes' own 2 s bound would cut.
	_, _ = d.HTTP(ctx)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep.Replicas[i] = replicaStatus(ctx, d, r)
		}()
	}
	wg.Wait()
	if cli, err := d.Etcd(ctx); err != nil {
		rep.MembersError = err.Error()
	} else {
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil {
			rep.MembersError = err.Error()
		}
		rep.Members = ms
	}
	rep.Certificates = certStatuses(ctx, d, rs)
	if j, err := NewJournalStore(d.StateDir, d.Cluster).Load(); err == nil {
		rep.Journal = j
	}
	addrs := map[string]string{}
	for _, r := range rs {
		addrs[r.Name] = r.Address
	}
	rep.Orphans = findOrphans(d.Cluster, d.Flavor(), rep.Members, addrs, rep.Journal)
	if v := d.FlavorCaps().Viewer; v != nil {
		if view, err := v.View(ctx); err != nil {
			rep.ViewError = err.Error()
		} else {
			rep.View = &view
		}
	}
	if rep.EndpointKind != "replica" {
		if err := probeEndpoint(ctx, d, rep); err != nil {
			rep.EndpointError = err.Error()
		}
	}
	return rep, nil
}

// endpointStatus fills in rep's endpoint: the static IP, the load
// balancer in front of it, a VIP's lone master, or the DNS name.
func endpointStatus(ctx context.Context, d *Deps, rep *Report, rs []providers.Replica) error {
	p := d.Provider
	rep.Endpoint, rep.EndpointKind = rep.StaticIP, "ip"
	if st, err := p.LoadBalancer().Get(ctx); err == nil {
		rep.LB = &st
		rep.EndpointKind = "lb"
	} else if !errors.Is(err, errkind.NotFound) {
		return err
	}
	if rep.LB == nil && len(rs) == 1 && lb.HeldOnlyByLB(p.StaticIP()) {
		// A VIP only the load balancer holds (metal), none yet: the single
		// master is reached at its own address (its health is its own,
		// in its ReplicaStatus).
		rep.Endpoint, rep.EndpointKind = rs[0].Address, "replica"
	}
	if ep, err := LoadEndpoint(d.StateDir, d.Cluster); err == nil && ep.DNSName != "" {
		rep.Endpoint, rep.EndpointKind, rep.DNSName = ep.DNSName, "dns", ep.DNSName
	}
	return nil
}

// certStatuses inspects the serving certificate each replica carries,
// with what is wrong with it (its SANs against the cluster's, its
// expiry), sorted by replica.
func certStatuses(ctx context.Context, d *Deps, rs []providers.Replica) []CertStatus {
	var out []CertStatus
	want, wantErr := clusterSANs(ctx, d, "")
	for _, r := range rs {
		pemBytes := r.Template.Files[providers.FileAPIServerCert]
		if len(pemBytes) == 0 {
			continue
		}
		info, err := certs.Inspect(pemBytes)
		if err != nil {
			continue
		}
		cs := CertStatus{Replica: r.Name, DNSNames: info.DNSNames, IPs: info.IPs, NotAfter: info.NotAfter, SHA256: info.SHA256}
		if wantErr == nil {
			cs.Problem = certProblem(r, want, CertRenewWindow, time.Now())
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
	return out
}

func replicaStatus(ctx context.Context, d *Deps, r providers.Replica) ReplicaStatus {
	s := ReplicaStatus{Name: r.Name, Address: r.Address, Version: r.Template.Version, State: r.State}
	if !r.Running() {
		s.Error = "not running"
		return s
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := d.Probe(cctx, d.Provider.APIServerURL(r), "/readyz"); err != nil {
		s.Error = err.Error()
	} else {
		s.Healthy = true
	}
	if v, err := d.ReplicaVersion(cctx, r); err == nil {
		s.Version = v
	} else if s.Error == "" {
		s.Error = fmt.Sprintf("version: %v", err)
	}
	return s
}
