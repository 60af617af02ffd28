package tfexternal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

func testCA(t *testing.T) ([]byte, string) {
	t.Helper()
	ca, err := certs.NewCA("tfexternal-test", certs.ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.Cert.Raw)
	return ca.CertPEM, hex.EncodeToString(sum[:])
}

func member(name, addr string, leader bool) etcdmember.Member {
	return etcdmember.Member{Name: name, PeerURLs: []string{"https://" + addr + ":2380"}, ClientURLs: []string{"https://" + addr + ":2379"}, Leader: leader, Healthy: true}
}

func replica(name, addr, version string) workflows.ReplicaStatus {
	return workflows.ReplicaStatus{Name: name, Address: addr, Version: version, Healthy: true, State: "running"}
}

var (
	t1 = time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	t2 = time.Date(2026, 6, 7, 8, 9, 10, 0, time.FixedZone("CEST", 2*3600))
)

// threeReplicas is a healthy HA cluster behind an LB with a DNS name; the
// report lists things out of order on purpose.
func threeReplicas() workflows.Report {
	return workflows.Report{
		Cluster: "prod", Provider: "local", Endpoint: "api.example.com", EndpointKind: "dns", StaticIP: "10.0.0.1", DNSName: "api.example.com",
		Replicas: []workflows.ReplicaStatus{
			replica("prod-master-f00", "10.0.0.10", "v1.30.3"),
			replica("prod-master", "10.0.0.2", "v1.30.2"),
			replica("prod-master-0a1", "10.0.0.3", "v1.30.2"),
		},
		Members: []etcdmember.Member{
			member("prod-master-f00", "10.0.0.10", false),
			member("prod-master", "10.0.0.2", false),
			member("prod-master-0a1", "10.0.0.3", true),
		},
		Certificates: []workflows.CertStatus{
			{Replica: "prod-master", NotAfter: t1},
			{Replica: "prod-master-0a1", NotAfter: t2},
			{Replica: "prod-master-f00", NotAfter: t1.Add(time.Hour)},
		},
	}
}

func TestResult(t *testing.T) {
	t.Parallel()
	caPEM, caSum := testCA(t)
	const existing3 = "prod-master=https://10.0.0.2:2380,prod-master-0a1=https://10.0.0.3:2380,prod-master-f00=https://10.0.0.10:2380"
	next3 := NextReplicaName("prod", map[string]bool{"prod-master": true, "prod-master-0a1": true, "prod-master-f00": true})
	base3 := map[string]string{
		"cluster": "prod", "provider": "local",
		"endpoint": "api.example.com", "endpoint_kind": "dns", "static_ip": "10.0.0.1", "dns_name": "api.example.com",
		"replicas":          "prod-master,prod-master-0a1,prod-master-f00",
		"replica_addresses": "10.0.0.10,10.0.0.2,10.0.0.3",
		"replica_map":       "prod-master=10.0.0.2,prod-master-0a1=10.0.0.3,prod-master-f00=10.0.0.10",
		"replica_count":     "3", "leader": "prod-master-0a1", "healthy": "true",
		"etcd_initial_cluster": existing3, "etcd_initial_cluster_existing": existing3, "etcd_initial_cluster_state": "existing",
		"next_replica_name": next3, "next_replica_peer_url": "",
		"versions": "v1.30.2,v1.30.3", "ca_cert_sha256": caSum, "cert_expiry": "2026-06-07T06:09:10Z",
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := maps.Clone(m)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	single := workflows.Report{
		Cluster: "demo", Provider: "local", Endpoint: "127.0.9.1", EndpointKind: "ip", StaticIP: "127.0.9.1", StaticIPHolder: "demo-master",
		Replicas:     []workflows.ReplicaStatus{replica("demo-master", "127.0.9.2", "v1.30.2")},
		Members:      []etcdmember.Member{member("demo-master", "127.0.9.2", true)},
		Certificates: []workflows.CertStatus{{Replica: "demo-master", NotAfter: t1}},
	}
	nextDemo := NextReplicaName("demo", map[string]bool{"demo-master": true})
	base1 := map[string]string{
		"cluster": "demo", "provider": "local",
		"endpoint": "127.0.9.1", "endpoint_kind": "ip", "static_ip": "127.0.9.1", "dns_name": "",
		"replicas": "demo-master", "replica_addresses": "127.0.9.2", "replica_map": "demo-master=127.0.9.2",
		"replica_count": "1", "leader": "demo-master", "healthy": "true",
		"etcd_initial_cluster": "demo-master=https://127.0.9.2:2380", "etcd_initial_cluster_existing": "demo-master=https://127.0.9.2:2380",
		"etcd_initial_cluster_state": "existing", "next_replica_name": nextDemo, "next_replica_peer_url": "",
		"versions": "v1.30.2", "ca_cert_sha256": caSum, "cert_expiry": "2027-01-02T03:04:05Z",
	}
	unhealthy := threeReplicas()
	unhealthy.Replicas[0].Healthy, unhealthy.Replicas[0].Error = false, "GET /readyz: connection refused"
	unhealthy.Members[0].Healthy = false
	noLeader := threeReplicas()
	noLeader.Members[2].Leader = false
	pendingLearner := threeReplicas() // an add-replica in flight: learner added, VM not started
	pendingLearner.Members = append(pendingLearner.Members, etcdmember.Member{PeerURLs: []string{"https://10.0.0.4:2380"}, Learner: true})
	unfinished := single
	unfinished.Journal = &workflows.Journal{Workflow: "add-replica", Params: map[string]string{"name": nextDemo}}
	finished := single
	finished.Journal = &workflows.Journal{Workflow: "add-replica", Params: map[string]string{"name": nextDemo}, Finished: true}
	empty := workflows.Report{Cluster: "fresh", Provider: "local", Endpoint: "127.0.8.1", EndpointKind: "ip", StaticIP: "127.0.8.1"}

	cases := []struct {
		name string
		rep  workflows.Report
		in   Inputs
		want map[string]string
	}{
		{"one replica", single, Inputs{}, base1},
		{"one replica, next address known", single, Inputs{NextReplicaAddress: "127.0.9.3"},
			with(base1, "etcd_initial_cluster", "demo-master=https://127.0.9.2:2380,"+nextDemo+"=https://127.0.9.3:2380", "next_replica_peer_url", "https://127.0.9.3:2380")},
		{"one replica, next name pinned", single, Inputs{NextReplicaName: "demo-master-zzz"}, with(base1, "next_replica_name", "demo-master-zzz")},
		{"one replica, name and address pinned", single, Inputs{NextReplicaName: "demo-a", NextReplicaAddress: "127.0.9.7"},
			with(base1, "next_replica_name", "demo-a", "etcd_initial_cluster", "demo-a=https://127.0.9.7:2380,demo-master=https://127.0.9.2:2380", "next_replica_peer_url", "https://127.0.9.7:2380")},
		{"IPv6 next address", single, Inputs{NextReplicaAddress: "fd00::7"},
			with(base1, "etcd_initial_cluster", "demo-master=https://127.0.9.2:2380,"+nextDemo+"=https://[fd00::7]:2380", "next_replica_peer_url", "https://[fd00::7]:2380")},
		{"three replicas behind DNS", threeReplicas(), Inputs{}, base3},
		{"pinned name is already a member: reported as is, nothing appended", threeReplicas(), Inputs{NextReplicaName: "prod-master-f00"},
			with(base3, "next_replica_name", "prod-master-f00", "next_replica_peer_url", "https://10.0.0.10:2380")},
		{"pinned address already belongs to a member: that member is the next replica", threeReplicas(), Inputs{NextReplicaAddress: "10.0.0.10"},
			with(base3, "next_replica_name", "prod-master-f00", "next_replica_peer_url", "https://10.0.0.10:2380")},
		{"pinned name and its member's address", threeReplicas(), Inputs{NextReplicaName: "prod-master-f00", NextReplicaAddress: "10.0.0.10"},
			with(base3, "next_replica_name", "prod-master-f00", "next_replica_peer_url", "https://10.0.0.10:2380")},
		{"unhealthy replica", unhealthy, Inputs{}, with(base3, "healthy", "false")},
		{"no leader", noLeader, Inputs{}, with(base3, "healthy", "false", "leader", "")},
		{"unstarted learner is left out (as add-replica's CloneTemplate does)", pendingLearner, Inputs{}, base3},
		{"unstarted learner is the next replica", pendingLearner, Inputs{NextReplicaAddress: "10.0.0.4"},
			with(base3, "etcd_initial_cluster", providers.InitialCluster(map[string]string{
				"prod-master": "https://10.0.0.2:2380", "prod-master-0a1": "https://10.0.0.3:2380", "prod-master-f00": "https://10.0.0.10:2380", next3: "https://10.0.0.4:2380",
			}), "next_replica_peer_url", "https://10.0.0.4:2380")},
		{"unfinished add-replica's name is taken", unfinished, Inputs{},
			with(base1, "next_replica_name", NextReplicaName("demo", map[string]bool{"demo-master": true, nextDemo: true}))},
		{"finished add-replica's name is free", finished, Inputs{}, base1},
		{"no replicas, no members: a new cluster", empty, Inputs{}, map[string]string{
			"cluster": "fresh", "provider": "local", "endpoint": "127.0.8.1", "endpoint_kind": "ip", "static_ip": "127.0.8.1", "dns_name": "",
			"replicas": "", "replica_addresses": "", "replica_map": "", "replica_count": "0", "leader": "", "healthy": "false",
			"etcd_initial_cluster": "", "etcd_initial_cluster_existing": "", "etcd_initial_cluster_state": "new",
			"next_replica_name": NextReplicaName("fresh", nil), "next_replica_peer_url": "", "versions": "", "ca_cert_sha256": caSum, "cert_expiry": "",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := c.in
			in.CACertPEM = caPEM
			got, err := Result(c.rep, in)
			if err != nil {
				t.Fatal(err)
			}
			if k := slices.Sorted(maps.Keys(got)); !slices.Equal(k, Keys()) {
				t.Fatalf("key set %v, want %v", k, Keys())
			}
			for _, k := range Keys() {
				if got[k] != c.want[k] {
					t.Errorf("%s = %q, want %q", k, got[k], c.want[k])
				}
			}
			// What Terraform decodes: an object of strings, nothing else.
			b, _ := json.Marshal(got)
			var back map[string]any
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			for k, v := range back {
				if _, ok := v.(string); !ok {
					t.Errorf("%s is a %T", k, v)
				}
			}
		})
	}
}

func TestResultErrors(t *testing.T) {
	t.Parallel()
	caPEM, _ := testCA(t)
	unreachable := threeReplicas()
	unreachable.MembersError = "connect to etcd at https://10.0.0.2:2379:\ncontext deadline exceeded"
	cases := []struct {
		name string
		rep  workflows.Report
		in   Inputs
		want string
	}{
		{"etcd unreachable", unreachable, Inputs{CACertPEM: caPEM}, "cannot read the etcd members of cluster prod"},
		{"no CA", threeReplicas(), Inputs{}, "CA certificate"},
		{"garbage CA", threeReplicas(), Inputs{CACertPEM: []byte("not a pem")}, "CA certificate"},
		{"bad address", threeReplicas(), Inputs{CACertPEM: caPEM, NextReplicaAddress: "host.example.com"}, `next_replica_address: "host.example.com" is not an IP address`},
		{"address with zone", threeReplicas(), Inputs{CACertPEM: caPEM, NextReplicaAddress: "fe80::1%eth0"}, "not an IP address"},
		{"member name with another address", threeReplicas(), Inputs{CACertPEM: caPEM, NextReplicaName: "prod-master", NextReplicaAddress: "10.0.0.9"}, "already an etcd member with peer URL https://10.0.0.2:2380"},
		{"address of another member", threeReplicas(), Inputs{CACertPEM: caPEM, NextReplicaName: "prod-master-new", NextReplicaAddress: "10.0.0.2"}, "already the peer URL of etcd member prod-master"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := Result(c.rep, c.in)
			if err == nil {
				t.Fatalf("no error; result %v", got)
			}
			if !strings.Contains(err.Error(), c.want) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error %q: want one line containing %q", err, c.want)
			}
		})
	}
}

func TestNextReplicaName(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^prod-master-[0-9a-f]{3}$`)
	first := NextReplicaName("prod", nil)
	if !shape.MatchString(first) || first != NextReplicaName("prod", map[string]bool{"prod-master": true}) {
		t.Fatalf("first name %q", first)
	}
	if other := NextReplicaName("prod2", nil); other == first || !strings.HasPrefix(other, "prod2-master-") {
		t.Fatalf("another cluster's name %q", other)
	}
	// Taking the names one by one walks the sequence without repeats.
	taken := map[string]bool{}
	for i := 0; i < 300; i++ {
		n := NextReplicaName("prod", taken)
		if !shape.MatchString(n) || taken[n] {
			t.Fatalf("step %d: %q (taken: %v)", i, n, taken[n])
		}
		if n != NextReplicaName("prod", taken) {
			t.Fatal("not deterministic")
		}
		taken[n] = true
	}
	// With all 4096 names but one taken, that one is found; with all
	// taken, "".
	all := map[string]bool{}
	for i := 0; i < 4096; i++ {
		all[fmt.Sprintf("prod-master-%03x", i)] = true
	}
	delete(all, "prod-master-7e2")
	if n := NextReplicaName("prod", all); n != "prod-master-7e2" {
		t.Fatalf("last free name: %q", n)
	}
	all["prod-master-7e2"] = true
	if n := NextReplicaName("prod", all); n != "" {
		t.Fatalf("all taken: %q", n)
	}
}

func TestKeysSortedAndDocumented(t *testing.T) {
	t.Parallel()
	k := Keys()
	if !slices.IsSorted(k) || len(k) != 20 {
		t.Fatalf("Keys() = %v", k)
	}
	for _, want := range []string{"endpoint", "endpoint_kind", "static_ip", "dns_name", "replicas", "replica_addresses", "replica_count", "leader", "healthy",
		"etcd_initial_cluster", "etcd_initial_cluster_state", "next_replica_name", "versions", "ca_cert_sha256", "cert_expiry"} {
		if !slices.Contains(k, want) {
			t.Errorf("the issue's key %s is missing", want)
		}
	}
}
