package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/workflows"
)

func TestStatusFlavorView(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(100 * 24 * time.Hour)
	rep := workflows.Report{Cluster: "c", Flavor: "kubeadm",
		Members: []etcdmember.Member{{ID: 1, Name: "host-1", Leader: true, Healthy: true}, {ID: 2, Name: "host-2", Learner: true}},
		LB:      &lb.Status{Targets: []lb.TargetHealth{{Name: "host-1", Healthy: true}, {Name: "host-2", Draining: true}}},
		View: &flavors.View{Endpoint: "10.0.0.100:8443", Version: "v1.33.13", Problems: []string{"etcd learner 2 ..."},
			Masters: []flavors.MasterView{
				{Replica: "host-1", Node: "host-1", NodeReady: true, ControlPlane: true, KubeletVersion: "v1.33.13",
					StaticPods:   map[string]string{"kube-apiserver": "0123456789abcdef", "etcd": "fedcba9876543210"},
					Certificates: []flavors.CertificateExpiry{{Name: "admin.conf", Expires: exp.Add(time.Hour)}, {Name: "apiserver", Expires: exp}}},
				{Replica: "host-2", Node: "host-2"},
				{Node: "host-9", Error: "no machine"},
			}}}
	rows := viewRows(rep)
	want := []struct{ etcd, lb string }{{"leader", "healthy"}, {"learner", "draining"}, {"none", "not a target"}}
	for i, w := range want {
		if rows[i].Etcd != w.etcd || rows[i].LB != w.lb {
			t.Errorf("row %d: etcd %q lb %q; want %q %q", i, rows[i].Etcd, rows[i].LB, w.etcd, w.lb)
		}
	}
	if rows[0].NextExpiry == nil || rows[0].NextExpiry.Name != "apiserver" {
		t.Errorf("next expiry %+v", rows[0].NextExpiry)
	}
	var b bytes.Buffer
	printView(&b, rep)
	printViewProblems(&b, rep)
	for _, s := range []string{"KUBEADM VIEW", "endpoint 10.0.0.100:8443, version v1.33.13", "apiserver=01234567 etcd=fedcba98", "host-9", "KUBEADM: etcd learner 2"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, b.String())
		}
	}
	out := map[string]any{}
	addViewJSON(out, rep)
	j, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"flavor_view":`, `"side_by_side":[`, `"etcd":"learner"`, `"problems":["etcd learner 2 ..."]`} {
		if !strings.Contains(string(j), s) {
			t.Errorf("JSON lacks %s: %s", s, j)
		}
	}
	rep.View, rep.ViewError = nil, "no running master"
	out = map[string]any{}
	addViewJSON(out, rep)
	if out["flavor_view_error"] != "no running master" || out["flavor_view"] != nil {
		t.Errorf("view error JSON: %v", out)
	}
}
