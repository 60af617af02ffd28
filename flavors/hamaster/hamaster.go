// Package hamaster is the flavor of hamaster's own masters (the local
// provider's, and AWS masters in hamaster's user-data format): one etcd
// cluster whose members are named after their replicas with peer URLs on
// the replicas' addresses, certificates issued by hamaster from the
// cluster CA in the state directory (ReplicaFiles: the flavor is a
// flavors.ReplicaCertIssuer), the apiserver version in
// KUBE_VERSION (nothing to download), etcd reached by the provider's own
// way in (providers.EtcdReacher).
package hamaster

import (
	"context"
	"fmt"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// Flavor is hamaster's own master format on one cluster's provider.
type Flavor struct {
	p     providers.Provider
	reach providers.EtcdReacher
	// format writes and reads the masters' templates on a provider that
	// carries them as documents (providers.Formatted), nil on one that
	// does not: registry.Open hands it to the provider (Format).
	format providers.Format
}

// Format implements flavors.Flavor.
func (f *Flavor) Format() providers.Format { return f.format }

var (
	_ flavors.Flavor            = (*Flavor)(nil)
	_ flavors.ReplicaCertIssuer = (*Flavor)(nil)
)

// New binds the flavor to p, which must reach its masters' etcd
// (providers.EtcdReacher).
func New(p providers.Provider) (*Flavor, error) {
	c := providers.OwnCapabilitiesOf(p)
	r := c.EtcdReacher
	if r == nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: the %s provider's masters are not in hamaster's format (it cannot reach their etcd with the cluster CA's certificates)", flavors.Hamaster, p.Name())
	}
	f := &Flavor{p: p, reach: r}
	if fp := c.Formatted; fp != nil {
		if carrier := fp.Carrier(); carrier != providers.CarrierUserData {
			return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: the %s provider carries templates as %s, which hamaster's format has no form for", flavors.Hamaster, p.Name(), carrier)
		}
		f.format = UserData{}
	}
	return f, nil
}

// Name implements flavors.Flavor.
func (*Flavor) Name() string { return flavors.Hamaster }

// EtcdClusters implements flavors.Flavor: one cluster.
func (*Flavor) EtcdClusters() []string { return []string{flavors.EtcdMain} }

// EtcdMember implements flavors.Flavor: the member is named after the
// replica, its peer URL https://<address>:2380.
func (*Flavor) EtcdMember(_, replica, address string) (string, string) {
	return replica, providers.PeerURL(address)
}

// EtcdCluster implements flavors.Flavor through the provider.
func (f *Flavor) EtcdCluster(ctx context.Context, cluster string, exclude ...string) (*etcdmember.Client, error) {
	if cluster != flavors.EtcdMain {
		return nil, fmt.Errorf("etcd cluster %q: hamaster's masters run only %q", cluster, flavors.EtcdMain)
	}
	return f.reach.Etcd(ctx, exclude...)
}

// CloneTemplate implements flavors.Flavor: src copied except the
// certificate files (those hamaster issued for the new replica) and the
// etcd environment: INITIAL_ETCD_CLUSTER lists every started member plus
// the new one, ETCD_INITIAL_CLUSTER_STATE=existing.
func (f *Flavor) CloneTemplate(_ context.Context, src providers.Template, replica, address string, members map[string][]etcdmember.Member, files map[string][]byte) (providers.Template, error) {
	t := src.Clone()
	peers := map[string]string{}
	for _, m := range members[flavors.EtcdMain] {
		if m.Name == "" || len(m.PeerURLs) == 0 {
			continue // a learner not started yet: the new one, added below
		}
		peers[m.Name] = m.PeerURLs[0]
	}
	name, peer := f.EtcdMember(flavors.EtcdMain, replica, address)
	peers[name] = peer
	t.Env[nodeapi.KeyInitialEtcdCluster] = providers.InitialCluster(peers)
	t.Env[nodeapi.KeyEtcdInitialClusterState] = "existing"
	t.Files = files
	return t, nil
}

// MasterCA implements flavors.Flavor: never called (the flavor is a
// flavors.ReplicaCertIssuer: hamaster's masters chain to the cluster CA
// in the state directory).
func (*Flavor) MasterCA(context.Context) ([]byte, error) {
	return nil, errkind.Errorf(errkind.FailedPrecondition, "hamaster's masters carry no CA of their own: their certificates chain to the cluster CA in the state directory")
}

// APIServerPort implements flavors.Flavor: hamaster-node's kube-apiserver
// serves APISERVER_PORT, 6443 unless the template sets another
// (dataplane/nodeapi.DefaultAPIServerPort).
func (*Flavor) APIServerPort() int { return providers.APIServerPort }

// APIServerName implements flavors.Flavor: hamaster's serving
// certificates name every replica's address.
func (*Flavor) APIServerName() string { return "" }

// CheckVersion implements flavors.Flavor: a hamaster master's version is
// KUBE_VERSION, which needs nothing published.
func (*Flavor) CheckVersion(context.Context, string) error { return nil }
