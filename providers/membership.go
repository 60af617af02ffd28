package providers

import (
	"context"
	"fmt"
	"slices"

	"github.com/hamaster/hamaster/etcdmember"
)

// Names of the etcd clusters a master may run. Every provider's masters
// run EtcdMain; kube-up's also run EtcdEvents (cluster/gce/gci/
// configure-helper.sh start-etcd-servers: etcd on 2379/2380 and
// etcd-events on 4002/2381), whose members are added and removed with
// the main cluster's.
const (
	EtcdMain   = "main"
	EtcdEvents = "events"
)

// Membership is how a provider's masters take part in etcd: the clusters
// each master runs, the member name and peer URL a replica has in each,
// how to reach each cluster, and how a new master's template is cloned
// from a running one.
//
// Providers whose masters follow another tool's conventions implement it
// (GCE and AWS on kube-up's masters: members etcd-<hostname>, peer URLs by
// hostname, two clusters, replicate-master-instance's template). The rest
// get hamaster's own (MembershipOf): one cluster, the member named after
// the replica, its peer URL on the replica's address, and the certificates
// hamaster issues.
type Membership interface {
	// EtcdClusters lists the clusters every master runs, EtcdMain first.
	EtcdClusters() []string
	// EtcdMember is the member name and peer URL of replica (at address)
	// in cluster.
	EtcdMember(cluster, replica, address string) (name, peerURL string)
	// EtcdCluster connects to cluster through replicas other than those
	// in exclude. EtcdCluster(ctx, EtcdMain, ...) is Provider.Etcd.
	EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error)
	// CloneTemplate builds the template of a new master named replica, at
	// address, from src (a running master's): members are each cluster's
	// current members (the new one's learner may be among them, without
	// a name yet) and files the certificates hamaster issued for it, which
	// a provider whose masters carry their own may ignore.
	CloneTemplate(ctx context.Context, src Template, replica, address string, members map[string][]etcdmember.Member, files map[string][]byte) (Template, error)
}

// MembershipOf returns p's Membership, or hamaster's own conventions when
// p has none of its own.
func MembershipOf(p Provider) Membership {
	if m, ok := p.(Membership); ok {
		return m
	}
	return ownMembership{p: p}
}

// ownMembership is hamaster's own: one cluster, member = replica name,
// peer URL https://<address>:2380.
type ownMembership struct{ p Provider }

func (ownMembership) EtcdClusters() []string { return []string{EtcdMain} }

func (ownMembership) EtcdMember(_, replica, address string) (string, string) {
	return replica, PeerURL(address)
}

func (o ownMembership) EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error) {
	if cluster != EtcdMain {
		return nil, fmt.Errorf("etcd cluster %q: %s's masters run only %q", cluster, o.p.Name(), EtcdMain)
	}
	return o.p.Etcd(ctx, exclude...)
}

// CloneTemplate copies src except the certificate files and the etcd
// environment: INITIAL_ETCD_CLUSTER lists every started member plus the
// new one, ETCD_INITIAL_CLUSTER_STATE=existing.
func (o ownMembership) CloneTemplate(_ context.Context, src Template, replica, address string, members map[string][]etcdmember.Member, files map[string][]byte) (Template, error) {
	t := src.Clone()
	peers := map[string]string{}
	for _, m := range members[EtcdMain] {
		if m.Name == "" || len(m.PeerURLs) == 0 {
			continue // a learner not started yet: the new one, added below
		}
		peers[m.Name] = m.PeerURLs[0]
	}
	name, peer := o.EtcdMember(EtcdMain, replica, address)
	peers[name] = peer
	t.Env[EnvInitialEtcdCluster] = InitialCluster(peers)
	t.Env[EnvEtcdInitialClusterState] = "existing"
	t.Files = files
	return t, nil
}

// FindMember finds replica's member in ms: by its member name, or by its
// peer URL for a learner that has not started yet (no name).
func FindMember(ms []etcdmember.Member, name, peerURL string) (etcdmember.Member, bool) {
	for _, m := range ms {
		if m.Name == name && name != "" {
			return m, true
		}
		if peerURL != "" && slices.Contains(m.PeerURLs, peerURL) {
			return m, true
		}
	}
	return etcdmember.Member{}, false
}

// MasterCertificates is implemented by providers whose masters carry
// certificates made by the tool that built them (kube-up's, in their
// kube-env and kube-master-certs metadata): hamaster issues none for them
// (Membership.CloneTemplate gives a new master its own), does not rotate
// theirs, and trusts the CA they name when it probes the apiservers.
type MasterCertificates interface {
	// ClusterCA is the PEM of the CA that signed the masters' apiserver
	// serving certificates, as the masters' metadata holds it.
	ClusterCA(ctx context.Context) ([]byte, error)
}
