package kubeadm

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
)

// checkExpirationOut is `kubeadm certs check-expiration -o json` as
// v1.33 prints it (cmd/kubeadm/app/apis/output/v1alpha3 Certificate),
// its "Reading configuration" line first.
const checkExpirationOut = `[check-expiration] Reading configuration from the "kubeadm-config" ConfigMap in namespace "kube-system"...
{
    "kind": "CertificateExpirationInfo",
    "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
    "certificates": [
        {"name": "admin.conf", "expirationDate": "2027-11-26T18:00:00Z", "residualTime": 31532400, "externallyManaged": false, "caName": "ca", "missing": false},
        {"name": "apiserver", "expirationDate": "2026-12-10T18:00:00Z", "residualTime": 1206000, "externallyManaged": false, "caName": "ca", "missing": false},
        {"name": "front-proxy-client", "expirationDate": "2026-12-01T18:00:00Z", "residualTime": 1, "externallyManaged": true, "caName": "front-proxy-ca", "missing": false},
        {"name": "super-admin.conf", "expirationDate": null, "residualTime": 0, "externallyManaged": false, "missing": true}
    ],
    "certificateAuthorities": [
        {"name": "ca", "expirationDate": "2036-11-24T18:00:00Z", "residualTime": 315360000, "externallyManaged": false, "missing": false},
        {"name": "etcd-ca", "expirationDate": "2026-11-20T18:00:00Z", "residualTime": 0, "externallyManaged": false, "missing": false}
    ]
}
`

func TestParseCheckExpiration(t *testing.T) {
	t.Parallel()
	cs, err := ParseCheckExpiration([]byte(checkExpirationOut))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	if want := []string{"admin.conf", "apiserver", "front-proxy-client", "super-admin.conf", "ca", "etcd-ca"}; !slices.Equal(names, want) {
		t.Fatalf("names %v; want %v", names, want)
	}
	if !cs[4].Authority || cs[1].Authority || !cs[3].Missing || !cs[2].ExternallyManaged || cs[1].CAName != "ca" ||
		!cs[1].ExpirationDate.Equal(time.Date(2026, 12, 10, 18, 0, 0, 0, time.UTC)) || cs[1].ResidualTime != 1206000 {
		t.Errorf("parsed %+v", cs)
	}
	for _, tc := range []struct{ name, out, want string }{
		{"no json", "error: couldn't read kubeadm-config", "no JSON"},
		{"another kind", `{"kind":"Images","apiVersion":"output.kubeadm.k8s.io/v1alpha3","images":[]}`, "CertificateExpirationInfo"},
		{"truncated", `{"kind":"CertificateExpirationInfo",`, "output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseCheckExpiration([]byte(tc.out)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one naming %q", err, tc.want)
			}
		})
	}
}

const nodesOut = `{"apiVersion":"v1","kind":"List","items":[
 {"metadata":{"name":"host-1","labels":{"node-role.kubernetes.io/control-plane":""}},
  "status":{"conditions":[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"True"}],
   "addresses":[{"type":"InternalIP","address":"10.0.0.1"},{"type":"Hostname","address":"host-1"}],
   "nodeInfo":{"kubeletVersion":"v1.33.13"}}},
 {"metadata":{"name":"worker","labels":{}},"status":{"conditions":[{"type":"Ready","status":"Unknown"}],"nodeInfo":{"kubeletVersion":"v1.33.13"}}}]}`

const podsOut = `{"apiVersion":"v1","kind":"List","items":[
 {"metadata":{"name":"etcd-host-1","labels":{"component":"etcd","tier":"control-plane"},
   "annotations":{"kubernetes.io/config.hash":"abc","kubernetes.io/config.mirror":"abc","kubernetes.io/config.source":"file"}},"spec":{"nodeName":"host-1"}},
 {"metadata":{"name":"not-a-mirror","labels":{"component":"kube-apiserver"},"annotations":{}},"spec":{"nodeName":"host-1"}}]}`

func TestParseNodesAndPods(t *testing.T) {
	t.Parallel()
	ns, err := ParseNodes([]byte(nodesOut))
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeInfo{{Name: "host-1", ControlPlane: true, Ready: true, KubeletVersion: "v1.33.13", InternalIP: "10.0.0.1"}, {Name: "worker", KubeletVersion: "v1.33.13"}}
	if !slices.Equal(ns, want) {
		t.Errorf("ParseNodes = %+v; want %+v", ns, want)
	}
	ps, err := ParseMirrorPods([]byte(podsOut))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ps, []MirrorPod{{Component: "etcd", Node: "host-1", Hash: "abc"}}) {
		t.Errorf("ParseMirrorPods = %+v", ps)
	}
	if _, err := ParseNodes([]byte("No resources found")); err == nil {
		t.Error("ParseNodes of text: no error")
	}
}

func TestBuildView(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	allPods := func(nodes ...string) []MirrorPod {
		var ps []MirrorPod
		for _, n := range nodes {
			for _, c := range StaticPodComponents {
				ps = append(ps, MirrorPod{Component: c, Node: n, Hash: c + "-" + n})
			}
		}
		return ps
	}
	cert := func(name string, in time.Duration) CertificateInfo {
		return CertificateInfo{Name: name, ExpirationDate: now.Add(in), CAName: "ca"}
	}
	healthy := func() ViewInput {
		return ViewInput{
			Now:      now,
			Config:   ClusterConfiguration{ControlPlaneEndpoint: "10.0.0.100:8443", KubernetesVersion: "v1.33.13"},
			Machines: []ViewMachine{{"host-1", "host-1", "10.0.0.1", true}, {"host-2", "host-2", "10.0.0.2", true}},
			Nodes: []NodeInfo{{Name: "host-1", ControlPlane: true, Ready: true, KubeletVersion: "v1.33.13"},
				{Name: "host-2", ControlPlane: true, Ready: true, KubeletVersion: "v1.33.13"}, {Name: "worker", Ready: true}},
			Pods: allPods("host-1", "host-2"),
			Members: []etcdmember.Member{{ID: 0xa, Name: "host-1", PeerURLs: []string{"https://10.0.0.1:2380"}},
				{ID: 0xb, Name: "host-2", PeerURLs: []string{"https://10.0.0.2:2380"}}},
			Certs: map[string][]CertificateInfo{"host-1": {cert("apiserver", 300*24*time.Hour)}, "host-2": {cert("apiserver", 300*24*time.Hour)}},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*ViewInput)
		want []string // one substring a problem each, in order
	}{
		{"healthy", func(*ViewInput) {}, nil},
		{"certificate expiring", func(in *ViewInput) {
			in.Certs["host-2"] = []CertificateInfo{cert("apiserver", 10*24*time.Hour), cert("admin.conf", 40*24*time.Hour)}
		}, []string{"certificate apiserver on host-2 expires in 10d (2026-12-06T18:00:00Z): `hamaster rotate-certs --yes` renews it"}},
		{"certificate expired", func(in *ViewInput) { in.Certs["host-1"] = []CertificateInfo{cert("etcd-server", -time.Hour)} },
			[]string{"certificate etcd-server on host-1 EXPIRED 2026-11-26T17:00:00Z: `hamaster rotate-certs --yes` renews it"}},
		{"CA and external certificate", func(in *ViewInput) {
			in.Certs["host-1"] = []CertificateInfo{{Name: "ca", ExpirationDate: now.Add(24 * time.Hour), Authority: true},
				{Name: "front-proxy-client", ExpirationDate: now.Add(24 * time.Hour), ExternallyManaged: true}}
		}, []string{"CA ca on host-1 expires in 1d (2026-11-27T18:00:00Z): kubeadm renews no CA", "front-proxy-client on host-1 expires in 1d (2026-11-27T18:00:00Z): kubeadm does not manage it"}},
		{"missing certificate ignored", func(in *ViewInput) {
			in.Certs["host-2"] = append(in.Certs["host-2"], CertificateInfo{Name: "super-admin.conf", Missing: true})
		}, nil},
		{"node without etcd member", func(in *ViewInput) { in.Members = in.Members[:1] },
			[]string{"control-plane Node host-2 has no etcd member: `hamaster remove-replica --name host-2`"}},
		{"node without machine", func(in *ViewInput) { in.Machines = in.Machines[:1] },
			[]string{"control-plane Node host-2 has no machine but etcd member b: `hamaster remove-replica --member-id b`"}},
		{"node without machine or member", func(in *ViewInput) { in.Machines, in.Members = in.Machines[:1], in.Members[:1] },
			[]string{"control-plane Node host-2 has no machine and no etcd member: `hamaster remove-replica --name host-2`"}},
		{"learner without node", func(in *ViewInput) {
			in.Machines = append(in.Machines, ViewMachine{"host-3", "host-3", "10.0.0.3", true})
			in.Members = append(in.Members, etcdmember.Member{ID: 0xc, PeerURLs: []string{"https://10.0.0.3:2380"}, Learner: true})
			in.Pods = append(in.Pods, allPods("host-3")...)
		}, []string{"master host-3 runs without a control-plane Node host-3", "etcd learner c (unstarted) (https://10.0.0.3:2380) has no control-plane Node (a join under way, or cut short): `hamaster remove-replica --name host-3`"}},
		{"member without node or machine", func(in *ViewInput) {
			in.Members = append(in.Members, etcdmember.Member{ID: 0xd, Name: "old", PeerURLs: []string{"https://10.0.0.9:2380"}})
		}, []string{"etcd member d old (https://10.0.0.9:2380) has no control-plane Node and no machine: `hamaster remove-replica --member-id d`"}},
		{"node not ready, a mirror pod missing", func(in *ViewInput) {
			in.Nodes[1].Ready = false
			in.Pods = slices.DeleteFunc(in.Pods, func(p MirrorPod) bool { return p.Node == "host-2" && p.Component == "kube-scheduler" })
		}, []string{"Node host-2 (host-2) is not Ready", "Node host-2 (host-2) has no mirror pod of kube-scheduler"}},
		{"machine stopped", func(in *ViewInput) { in.Machines[1].Running = false; delete(in.Certs, "host-2") },
			[]string{"machine host-2 is not running; its control-plane Node host-2 remains"}},
		{"etcd unreadable: no member problems", func(in *ViewInput) { in.Members, in.MembersError = nil, "unavailable" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.edit(&in)
			v := BuildView(in)
			if len(v.Problems) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d: %q", strings.Join(v.Problems, "\n"), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(v.Problems[i], w) {
					t.Errorf("problem %d = %q; want it to contain %q", i, v.Problems[i], w)
				}
			}
			if v.Endpoint != "10.0.0.100:8443" || v.Version != "v1.33.13" {
				t.Errorf("endpoint %q version %q", v.Endpoint, v.Version)
			}
		})
	}
	v := BuildView(healthy())
	if len(v.Masters) != 2 || v.Masters[0].Replica != "host-1" || !v.Masters[0].NodeReady || !v.Masters[0].ControlPlane ||
		v.Masters[0].KubeletVersion != "v1.33.13" || v.Masters[0].StaticPods["etcd"] != "etcd-host-1" || len(v.Masters[0].Certificates) != 1 {
		t.Errorf("masters %+v", v.Masters)
	}
}

// throughFirst reads through the first master that answers, and says
// why each failed when none does.
func TestThroughFirst(t *testing.T) {
	t.Parallel()
	rs := []providers.Replica{{Name: "m0"}, {Name: "m1"}, {Name: "m2"}}
	var tried []string
	err := throughFirst(rs, func(master string) error {
		tried = append(tried, master)
		if master == "m0" {
			return errors.New("m0 down")
		}
		return nil
	})
	if err != nil || !slices.Equal(tried, []string{"m0", "m1"}) {
		t.Errorf("throughFirst = %v, tried %v; want nil after m0, m1", err, tried)
	}
	if err := throughFirst(nil, func(string) error { return nil }); err == nil {
		t.Error("throughFirst of no masters = nil; want an error")
	}
	err = throughFirst(rs, func(master string) error { return errors.New(master + " down") })
	for _, m := range []string{"m0", "m1", "m2"} {
		if err == nil || !strings.Contains(err.Error(), m+" down") {
			t.Errorf("throughFirst with none answering = %v; want every master's error (%s)", err, m)
		}
	}
}
