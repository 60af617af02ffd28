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

// TestStatusPinned: the consumers still on one master's own address,
// in the text (each, then each command that repoints them, once) and
// in JSON (flavor_view.pinned, always a list; pinned_error).
func TestStatusPinned(t *testing.T) {
	t.Parallel()
	const fix = "hamaster endpoint set --yes 10.0.0.100:8443"
	rep := workflows.Report{Cluster: "c", Flavor: "kubeadm", View: &flavors.View{Endpoint: "10.0.0.100:8443", Masters: []flavors.MasterView{},
		Pinned: []flavors.Pin{
			{Consumer: "kube-system/kube-proxy ConfigMap kubeconfig.conf", Server: "https://10.0.0.11:6443", Master: "host-1", Fix: fix},
			{Consumer: "/etc/kubernetes/admin.conf", On: "host-2", Server: "https://10.0.0.11:6443", Master: "host-1", Fix: fix},
		}}}
	var b bytes.Buffer
	printPinned(&b, rep)
	text := b.String()
	for _, s := range []string{"PINNED TO ONE MASTER", "endpoint 10.0.0.100:8443", "remove-replica refuses",
		"kube-system/kube-proxy ConfigMap kubeconfig.conf names host-1's own address (https://10.0.0.11:6443)",
		"/etc/kubernetes/admin.conf on host-2 names host-1's own address", "repoint: " + fix} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
	if n := strings.Count(text, "repoint: "); n != 1 {
		t.Errorf("%d repoint lines; want the one command once:\n%s", n, text)
	}
	out := map[string]any{}
	addViewJSON(out, rep)
	j, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"pinned":[{"consumer":"kube-system/kube-proxy ConfigMap kubeconfig.conf","server":"https://10.0.0.11:6443","master":"host-1","fix":"` + fix + `"}`, `"on":"host-2"`} {
		if !strings.Contains(string(j), s) {
			t.Errorf("JSON lacks %s: %s", s, j)
		}
	}

	// Nothing pinned: no section, an empty list.
	rep.View.Pinned = nil
	b.Reset()
	printPinned(&b, rep)
	out = map[string]any{}
	addViewJSON(out, rep)
	j, _ = json.Marshal(out)
	if b.Len() != 0 || !strings.Contains(string(j), `"pinned":[]`) {
		t.Errorf("nothing pinned: text %q, JSON %s", b.String(), j)
	}
	// Unreadable.
	rep.View.PinnedError = "no master's admin.conf answers"
	b.Reset()
	printPinned(&b, rep)
	out = map[string]any{}
	addViewJSON(out, rep)
	j, _ = json.Marshal(out)
	if !strings.Contains(b.String(), "unreadable: no master's admin.conf answers") || !strings.Contains(string(j), `"pinned_error":"no master's admin.conf answers"`) {
		t.Errorf("unreadable: text %q, JSON %s", b.String(), j)
	}
}
