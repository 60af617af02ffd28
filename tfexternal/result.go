package tfexternal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// Result keys. Every key is always present (the key set is stable); a
// value that does not apply is "". Lists are comma-separated and sorted
// (plain string order); name=value lists (replica_map, the etcd initial
// clusters) are sorted by name.
const (
	ResCluster                    = "cluster"
	ResProvider                   = "provider"
	ResEndpoint                   = "endpoint"
	ResEndpointKind               = "endpoint_kind"
	ResStaticIP                   = "static_ip"
	ResDNSName                    = "dns_name"
	ResReplicas                   = "replicas"
	ResReplicaAddresses           = "replica_addresses"
	ResReplicaMap                 = "replica_map"
	ResReplicaCount               = "replica_count"
	ResLeader                     = "leader"
	ResHealthy                    = "healthy"
	ResEtcdInitialCluster         = "etcd_initial_cluster"
	ResEtcdInitialClusterExisting = "etcd_initial_cluster_existing"
	ResEtcdInitialClusterState    = "etcd_initial_cluster_state"
	ResNextReplicaName            = "next_replica_name"
	ResNextReplicaPeerURL         = "next_replica_peer_url"
	ResVersions                   = "versions"
	ResCACertSHA256               = "ca_cert_sha256"
	ResCertExpiry                 = "cert_expiry"
)

// Keys lists every result key, sorted.
func Keys() []string {
	k := []string{
		ResCluster, ResProvider, ResEndpoint, ResEndpointKind, ResStaticIP, ResDNSName,
		ResReplicas, ResReplicaAddresses, ResReplicaMap, ResReplicaCount, ResLeader, ResHealthy,
		ResEtcdInitialCluster, ResEtcdInitialClusterExisting, ResEtcdInitialClusterState,
		ResNextReplicaName, ResNextReplicaPeerURL, ResVersions, ResCACertSHA256, ResCertExpiry,
	}
	sort.Strings(k)
	return k
}

// Inputs are what Result needs besides the status report.
type Inputs struct {
	// CACertPEM is the cluster CA certificate
	// (<state_dir>/<cluster>/pki/ca.crt).
	CACertPEM []byte
	// NextReplicaName and NextReplicaAddress come from the query ("" when
	// not given); see Result.
	NextReplicaName    string
	NextReplicaAddress string
}

// Result builds the data source's flat result from a status report. It is a
// pure function of its arguments.
//
// The next replica: its name is NextReplicaName when given, else the first
// name of NextReplicaName's deterministic sequence that no replica, etcd
// member or unfinished add-replica uses. Its etcd entry
// (name=https://<address>:2380) is known only when NextReplicaAddress is
// given; then etcd_initial_cluster is the existing members plus that entry,
// otherwise it equals etcd_initial_cluster_existing and the new VM must
// append its own entry. When the given name or address already belongs to
// an etcd member (the replica was created from an earlier read), that
// member is the "next replica": nothing is appended twice, so the values a
// created replica was given do not change on the next refresh.
//
// Errors: the etcd member list could not be read (etcd_initial_cluster
// would be wrong), a malformed CA certificate or next replica address, and
// a name and address that belong to different members.
func Result(rep workflows.Report, in Inputs) (map[string]string, error) {
	if rep.MembersError != "" {
		return nil, fmt.Errorf("cannot read the etcd members of cluster %s (%s), so the etcd initial cluster for a new replica is unknown", rep.Cluster, oneLine(rep.MembersError))
	}
	caSum, err := certs.SHA256Fingerprint(in.CACertPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster %s CA certificate: %s", rep.Cluster, oneLine(err.Error()))
	}

	names := make([]string, 0, len(rep.Replicas))
	addrs := make([]string, 0, len(rep.Replicas))
	pairs := map[string]string{}
	versions := map[string]bool{}
	taken := map[string]bool{}
	for _, r := range rep.Replicas {
		names = append(names, r.Name)
		if r.Address != "" {
			addrs = append(addrs, r.Address)
		}
		pairs[r.Name] = r.Address
		if r.Version != "" {
			versions[r.Version] = true
		}
		taken[r.Name] = true
	}

	// Started members: name → first peer URL, as add-replica's
	// CloneTemplate renders INITIAL_ETCD_CLUSTER. A learner that has not
	// started yet has no name and is left out, as CloneTemplate does.
	peers := map[string]string{}
	byURL := map[string]string{}
	var leaders []string
	for _, m := range rep.Members {
		if m.Leader && m.Name != "" {
			leaders = append(leaders, m.Name)
		}
		if m.Name == "" || len(m.PeerURLs) == 0 {
			continue
		}
		peers[m.Name] = m.PeerURLs[0]
		for _, u := range m.PeerURLs {
			byURL[u] = m.Name
		}
		taken[m.Name] = true
	}
	if j := rep.Journal; j != nil && !j.Finished && j.Workflow == "add-replica" && j.Params["name"] != "" {
		taken[j.Params["name"]] = true // add-replica without --name resumes it
	}
	sort.Strings(leaders)
	existing := providers.InitialCluster(peers)

	name, peerURL := in.NextReplicaName, ""
	if in.NextReplicaAddress != "" {
		a, err := netip.ParseAddr(in.NextReplicaAddress)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("query key %s: %q is not an IP address", KeyNextReplicaAddress, in.NextReplicaAddress)
		}
		peerURL = providers.PeerURL(a.String())
	}
	switch owner := byURL[peerURL]; {
	case name != "" && peers[name] != "":
		// Already a member: report it as it is.
		if peerURL != "" && owner != name {
			return nil, fmt.Errorf("next replica %s is already an etcd member with peer URL %s, not %s", name, peers[name], peerURL)
		}
		peerURL = peers[name]
	case peerURL != "" && owner != "":
		if name != "" {
			return nil, fmt.Errorf("next replica address %s is already the peer URL of etcd member %s, not of %s", in.NextReplicaAddress, owner, name)
		}
		name = owner
	case name == "":
		name = NextReplicaName(rep.Cluster, taken)
	}
	initial := existing
	if peerURL != "" {
		withNext := map[string]string{name: peerURL}
		for n, u := range peers {
			withNext[n] = u
		}
		initial = providers.InitialCluster(withNext)
	}
	state := "new"
	if len(peers) > 0 {
		state = "existing"
	}

	expiry := ""
	var earliest time.Time
	for _, c := range rep.Certificates {
		if earliest.IsZero() || c.NotAfter.Before(earliest) {
			earliest = c.NotAfter
		}
	}
	if !earliest.IsZero() {
		expiry = earliest.UTC().Format(time.RFC3339)
	}

	leader := ""
	if len(leaders) > 0 {
		leader = leaders[0]
	}
	return map[string]string{
		ResCluster:                    rep.Cluster,
		ResProvider:                   rep.Provider,
		ResEndpoint:                   rep.Endpoint,
		ResEndpointKind:               rep.EndpointKind,
		ResStaticIP:                   rep.StaticIP,
		ResDNSName:                    rep.DNSName,
		ResReplicas:                   sortedList(names),
		ResReplicaAddresses:           sortedList(addrs),
		ResReplicaMap:                 providers.InitialCluster(pairs), // name=address, sorted by name
		ResReplicaCount:               strconv.Itoa(len(rep.Replicas)),
		ResLeader:                     leader,
		ResHealthy:                    strconv.FormatBool(rep.Healthy()),
		ResEtcdInitialCluster:         initial,
		ResEtcdInitialClusterExisting: existing,
		ResEtcdInitialClusterState:    state,
		ResNextReplicaName:            name,
		ResNextReplicaPeerURL:         peerURL,
		ResVersions:                   sortedList(keys(versions)),
		ResCACertSHA256:               caSum,
		ResCertExpiry:                 expiry,
	}, nil
}

// NextReplicaName returns a deterministic replica name for cluster that is
// not in taken: the first <cluster>-master-<3 hex> where the hex digits are
// the start of SHA-256("<cluster>/<i>") for i = 0, 1, 2... It has the shape
// of add-replica's random default (pass it back with add-replica --name) but
// stays the same from one Terraform refresh to the next as long as the
// replicas do not change. "" only if all 4096 names are taken.
func NextReplicaName(cluster string, taken map[string]bool) string {
	return nextName(cluster, cluster+"-master", taken)
}

// NextReplicaNameFor is NextReplicaName for masters named masterName-<3
// hex> (kube-up's MASTER_NAME, when it is not <cluster>-master).
func NextReplicaNameFor(cluster, masterName string, taken map[string]bool) string {
	return nextName(cluster, masterName, taken)
}

func nextName(cluster, masterName string, taken map[string]bool) string {
	tried := map[string]bool{}
	for i := 0; len(tried) < 4096 && i < 1<<20; i++ {
		sum := sha256.Sum256([]byte(cluster + "/" + strconv.Itoa(i)))
		n := masterName + "-" + hex.EncodeToString(sum[:2])[:3]
		if !taken[n] {
			return n
		}
		tried[n] = true
	}
	return ""
}

func sortedList(s []string) string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
