package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/workflows"
)

// --provider metal with a bad inventory, VIP or VIP port is refused
// (exit 2) naming the flag, before anything changes: no host is dialed
// and the state directory stays empty.
func TestMetalBadInputNamesTheFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inv := writeTestFile(t, dir, "inventory.yaml", "vip: 192.0.2.100\nhosts:\n  - name: cp-1\n    address: 192.0.2.11\n    role: control-plane\n")
	typo := writeTestFile(t, dir, "typo.yaml", "vip: 192.0.2.100\nhosts:\n  - name: cp-1\n    adress: 192.0.2.11\n    role: control-plane\n")
	state := filepath.Join(dir, "state")
	key := []string{"--ssh-key", filepath.Join(dir, "id_ed25519")}
	// One at a time: the state directory is checked after them all.
	runCLICases(t, []string{"HOME=" + dir, "SSH_AUTH_SOCK=", "HAMASTER_STATE_DIR=" + state, "HAMASTER_PROVIDER=metal"}, false, []cliCase{
		{"no inventory", nil, []string{"status"}, 2, "--metal-inventory", ""},
		{"missing inventory", nil, append([]string{"status", "--metal-inventory", filepath.Join(dir, "nope.yaml")}, key...), 2, "--metal-inventory", ""},
		{"misspelt field", nil, append([]string{"status", "--metal-inventory", typo}, key...), 2, "adress", ""},
		{"VIP not an IP", nil, append([]string{"status", "--metal-inventory", inv, "--metal-vip", "300.1.1.1"}, key...), 2, "--metal-vip", ""},
		{"VIP a host's address", nil, append([]string{"status", "--metal-inventory", inv, "--metal-vip", "192.0.2.11"}, key...), 2, "--metal-vip", ""},
		{"VIP from the environment", []string{"HAMASTER_METAL_INVENTORY=" + inv, "HAMASTER_METAL_VIP=vip.example", "HAMASTER_SSH_KEY=" + key[1]}, []string{"status"}, 2, "--metal-vip", ""},
		{"VIP port", nil, append([]string{"status", "--metal-inventory", inv, "--metal-vip-port", "6443"}, key...), 2, "--metal-vip-port", ""},
		{"no SSH key", nil, []string{"status", "--metal-inventory", inv}, 2, "--ssh-key", ""},
		{"add-replica, missing inventory", []string{"HAMASTER_METAL_INVENTORY=" + filepath.Join(dir, "nope.yaml")}, append([]string{"add-replica", "--host", "cp-1", "--yes"}, key...), 2, "--metal-inventory", ""},
	})
	// Nothing of the cluster's was written (the state directory itself
	// may exist: mutating commands check it is writable first).
	if fp := stateFingerprint(t, state); len(fp) != 0 {
		t.Errorf("refused runs left state: %v", fp)
	}
}

// On metal, status names the VIP's holder and shows each backend as the
// holder's HAProxy sees it (text and JSON).
func TestStatusShowsTheVIPHolder(t *testing.T) {
	t.Parallel()
	rep := workflows.Report{Cluster: "lab", Provider: "metal", Flavor: "kubeadm", Endpoint: "192.0.2.100", EndpointKind: "lb",
		LB: &lb.Status{IP: "192.0.2.100", Holder: "cp-2", Viewer: "cp-2", Targets: []lb.TargetHealth{
			{Name: "cp-1", Healthy: true, Draining: true, Reason: "DRAIN L7OK"},
			{Name: "cp-2", Healthy: true, Reason: "UP L7OK"},
			{Name: "cp-3", Reason: "DOWN L4CON"},
		}}}
	var out bytes.Buffer
	printStatus(&env{stdout: &out}, rep)
	for _, want := range []string{"VIP 192.0.2.100 held by cp-2; backends as cp-2's HAProxy sees them", "HAPROXY", "DRAIN L7OK", "DOWN L4CON"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	js := statusJSON(rep)["lb"].(map[string]any)
	if js["holder"] != "cp-2" || js["viewer"] != "cp-2" {
		t.Errorf("status JSON lb: %v", js)
	}
	rep.LB.Holder, rep.LB.Viewer = "", ""
	out.Reset()
	printStatus(&env{stdout: &out}, rep)
	if !strings.Contains(out.String(), "VIP 192.0.2.100 held by NOBODY; no master's HAProxy answers") {
		t.Errorf("status with no holder:\n%s", out.String())
	}
	// Two holders: a split brain, named, and the cluster not healthy
	// (status exits 3) however healthy the rest is.
	rep.LB.Holder, rep.LB.Viewer = "cp-1,cp-2", "cp-1"
	out.Reset()
	printStatus(&env{stdout: &out}, rep)
	if !strings.Contains(out.String(), "VIP 192.0.2.100 held by cp-1 AND cp-2 AT ONCE (split brain)") {
		t.Errorf("status with two holders:\n%s", out.String())
	}
	rep.Replicas = []workflows.ReplicaStatus{{Name: "cp-1", Healthy: true}}
	rep.Members = []etcdmember.Member{{Name: "cp-1", Healthy: true, Leader: true}}
	rep.LB.Holder = "cp-1"
	if !rep.Healthy() {
		t.Fatalf("the report without its split brain is not healthy: %+v", rep)
	}
	rep.LB.Holder = "cp-1,cp-2"
	if rep.Healthy() {
		t.Error("a split brain reported healthy")
	}
}
