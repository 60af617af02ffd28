//go:build metallab

// The metal lab's tier ('make test-metal', as root): the real CLI on the
// metal provider's hosts, against masters built by the real kubeadm.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const (
	metalVersion   = "v1.33.13"
	metalUpgradeTo = "v1.34.4"
)

// labEnv reads the HAMASTER_* variables metallab writes to hamaster.env
// ("export K=V" lines), as an operator sources it.
func labEnv(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kv, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				v = v[1 : len(v)-1] // the file quotes values with spaces
			}
			env = append(env, k+"="+v)
		}
	}
	return env
}

// TestMetalKubeadmEndToEnd is issue 23's and 24's walk with the real CLI:
// a single kubeadm master (kubeadm init, no controlPlaneEndpoint) →
// add-replica --host (the VIP brought up, the cluster converted to HA on
// it, the host joined; killed after each of its steps in turn and
// resumed each time) →
// add-replica (the first free host; killed during kubeadm join and
// resumed) with load on the old address and the VIP throughout: 0
// failed → the VIP's failovers (failoverLeg) → rotate-certs (kubeadm
// certs renew on each master in turn) →
// remove-replica of the VIP's holder (a planned handoff; killed after
// each of its steps in turn and resumed each time) and of another → one master
// left, no member or Node of the others, the freed hosts clean → a
// master joined by hand and removed. The walk's upgrades run on a lab of
// their own (TestMetalKubeadmUpgrade), which .ci/run runs beside it.
func TestMetalKubeadmEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	// Three hosts for masters, a fourth that an operator joins by hand
	// as a control plane at the end (handJoinLeg), and a worker (the
	// inventory's role: worker, the last host), joined before the
	// conversion.
	o := metallabtest.KubeadmOptions(t, 5, metalVersion)
	o.Workers = 1
	lab := metallabtest.StartKubeadm(ctx, t, o, metalVersion)
	h1, h2, h3, byHand, worker := lab.Hosts[0], lab.Hosts[1], lab.Hosts[2], lab.Hosts[3], lab.Hosts[4]
	masters := lab.Hosts[:3]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: metalVersion}); err != nil {
		t.Fatal(err)
	}
	cli := newLabCLI(ctx, t, lab)
	sh, must, command, hm, jsonOut, crashChain := cli.sh, cli.must, cli.command, cli.hm, cli.jsonOut, cli.crashChain
	// The worker joins master 0's single-master cluster as kubeadm's docs
	// have it done: its kubelet.conf names master 0's own address.
	if _, err := lab.KubeadmJoinWorker(ctx, worker, h1); err != nil {
		t.Fatal(err)
	}
	workerServer := func() string {
		return must(worker, "sed -n 's/^[[:space:]]*server:[[:space:]]*//p' /etc/kubernetes/kubelet.conf | head -n 1")
	}
	if srv, want := workerServer(), metallab.APIServer(h1, ""); srv != want {
		t.Fatalf("worker %s joined on %s; want master 0's own %s", worker.Name, srv, want)
	}
	// workerReady waits, through master via, for the worker's Node to be
	// Ready with a heartbeat (its Lease renewed) after since: its kubelet
	// reaches an apiserver. A hang guard bounds the wait.
	workerReady := func(via *metallab.Host, since time.Time, what string) {
		t.Helper()
		q := "kubectl --kubeconfig /etc/kubernetes/admin.conf "
		var last string
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a hang guard
		defer cancel()
		if err := wait.Until(wctx, time.Second, "worker "+worker.Name+"'s Node Ready, its Lease renewed, "+what, func() (bool, error) {
			ready, err1 := sh(via, q+"get node "+worker.Name+` -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'`)
			renew, err2 := sh(via, q+"-n kube-node-lease get lease "+worker.Name+" -o jsonpath='{.spec.renewTime}'")
			last = fmt.Sprintf("Ready %q (%v), renewTime %q (%v)", ready, err1, renew, err2)
			at, err := time.Parse(time.RFC3339Nano, renew)
			return err1 == nil && err2 == nil && ready == "True" && err == nil && at.After(since), nil
		}); err != nil {
			t.Fatalf("%v (last: %s)", err, last)
		}
	}
	workerReady(h1, time.Now(), "after its join")
	tlsFor := cli.tlsFor(h1)

	oldAddr := fmt.Sprintf("https://%s:6443/readyz", h1.Addr)
	vipAddr := fmt.Sprintf("https://%s:8443/readyz", lab.VIP)
	oldLoad := probeload.Start(ctx, oldAddr, tlsFor(), 20*time.Millisecond)

	// The crash-resume matrix over the converting add's steps, resumed
	// without --host (the journal has it).
	crashChain([]string{"add-replica", "--host", h2.Name, "--yes"}, []string{"add-replica", "--yes"}, chainOpts{})
	vipLoad := probeload.Start(ctx, vipAddr, tlsFor(), 20*time.Millisecond)
	if ep := must(h1, "kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' | grep controlPlaneEndpoint"); !strings.Contains(ep, lab.VIP.String()+":8443") {
		t.Fatalf("kubeadm-config after the conversion: %s", ep)
	}
	// The conversion moved the worker's kubelet too, as kubeadm init
	// --control-plane-endpoint would have had it: on the VIP, its Node
	// Ready again.
	if srv, want := workerServer(), "https://"+lab.VIP.String()+":8443"; srv != want {
		t.Errorf("worker %s's kubelet.conf after the conversion names %s; want the endpoint %s", worker.Name, srv, want)
	}
	workerReady(h1, time.Now(), "after the conversion")
	// The first free host (host-3), its hamaster killed while kubeadm
	// join runs there: the resumed run undoes the half join (no learner
	// survives) and joins again.
	cmd, out := command(nil, "add-replica", "--yes")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(ctx, 100*time.Millisecond, "kubeadm join on "+h3.Name, func() (bool, error) {
		out, _ := sh(h3, "pgrep -f '^kubeadm join' || true")
		return out != "", nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Logf("hamaster add-replica: killed during kubeadm join on %s", h3.Name)
	hm("add-replica", "--yes")

	var st struct {
		Replicas []struct {
			Name string `json:"name"`
		} `json:"replicas"`
	}
	// status reads every master over SSH (kubeadm's view, its CA, the
	// VIP's holder and HAProxy's view): its default 20 s is short on a
	// machine shared with other labs (seen: exceeded with 3 masters on 2
	// shared cores).
	if err := json.Unmarshal([]byte(hm("--output", "json", "status", "--timeout", "90s")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Replicas) != 3 {
		t.Fatalf("status after two adds: %+v", st)
	}
	// Three control-plane Nodes as soon as the adds have returned: the
	// second add was killed mid-join, and its resume waits for the
	// killed run's kubeadm join, still running on host-3, to end, then
	// checks the Node's control-plane label (Flavor.Joined) before it
	// calls the join done (once seen in .ci/run before that: 2 Nodes).
	if nodes := must(h1, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -l node-role.kubernetes.io/control-plane -o name | wc -l"); nodes != "3" {
		t.Fatalf("control-plane Nodes after two adds: %s; want 3", nodes)
	}
	// kubeconfig with no --flavor (the adds recorded kubeadm): a client
	// certificate `kubeadm kubeconfig user` issued on a master from the
	// masters' own CA, the VIP the server; the real kubectl on this
	// machine lists the four Nodes (three masters, the worker) through it.
	kcFile := filepath.Join(t.TempDir(), "kubeconfig")
	kcStart := time.Now()
	kcCmd, kcOut := command([]string{"HAMASTER_FLAVOR="}, "kubeconfig", "--file", kcFile, "--timeout", "90s")
	if err := kcCmd.Run(); err != nil {
		t.Fatalf("hamaster kubeconfig (no --flavor): %v\n%s", err, kcOut)
	}
	kcTook := time.Since(kcStart)
	if !strings.Contains(kcOut.String(), "server https://"+lab.VIP.String()+":8443") || !strings.Contains(kcOut.String(), "groups kubeadm:cluster-admins") {
		t.Errorf("hamaster kubeconfig: %s; want the VIP's endpoint and kubeadm's admin group", kcOut)
	}
	kubectlOut, err := exec.CommandContext(ctx, filepath.Join(o.BinDir, metalVersion, "kubectl"), "--kubeconfig", kcFile, "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil || strings.Count(strings.TrimSpace(string(kubectlOut)), "\n") != 3 { // four lines: the three masters' Nodes and the worker's
		t.Fatalf("kubectl get nodes with hamaster's kubeconfig: %v\n%s", err, kubectlOut)
	}
	t.Logf("hamaster kubeconfig in %s (%s); kubectl get nodes through the VIP: %s", kcTook.Round(100*time.Millisecond), strings.TrimSpace(kcOut.String()), strings.Fields(string(kubectlOut)))
	old := oldLoad.Stop()
	t.Logf("load on the old address %s through the conversion and both adds: %+v", oldAddr, old)
	if probeload.Failed(old) != 0 {
		t.Errorf("requests to the old address failed: %+v", old)
	}
	// Terraform's external data source reads the HA state on metal as on
	// the clouds: the VIP the endpoint, three healthy replicas.
	var tf map[string]string
	jsonOut(&tf, "{}", "terraform", "--timeout", "90s")
	if !strings.Contains(tf["endpoint"], lab.VIP.String()) || tf["replica_count"] != "3" || tf["healthy"] != "true" || tf["provider"] != "metal" {
		t.Fatalf("hamaster terraform after two adds: %v", tf)
	}
	t.Logf("hamaster terraform: endpoint %s (%s), %s replicas, healthy %s", tf["endpoint"], tf["endpoint_kind"], tf["replica_count"], tf["healthy"])

	vipLoad = failoverLeg(ctx, t, lab, sh, command, tlsFor(), vipLoad)

	// rotate-certs on kubeadm's certificates, under the VIP's load: each
	// master drained in turn (the VIP handed over when it holds it),
	// kubeadm certs renew all, its control plane restarted on them.
	certSum := "cat /etc/kubernetes/pki/apiserver-etcd-client.crt /etc/kubernetes/controller-manager.conf | md5sum"
	sums := map[string]string{}
	for _, h := range masters {
		sums[h.Name] = must(h, certSum)
	}
	hm("rotate-certs", "--expiring-within", "3650d", "--drain-grace", "2s", "--yes")
	for _, h := range masters {
		if must(h, certSum) == sums[h.Name] {
			t.Errorf("rotate-certs left the certificates of %s as they were", h.Name)
		}
		if left := must(h, "ls -A /var/lib/hamaster"); strings.Contains(left, "upgrade-backup") || strings.Contains(left, "restart-manifests") {
			t.Errorf("rotate-certs left on %s: %s", h.Name, left)
		}
	}

	// The VIP's holder leaves first: a planned handoff.
	holder := ""
	for _, h := range masters {
		if out, _ := sh(h, "ip -o addr show | grep -c ' "+lab.VIP.String()+"/' || true"); out == "1" {
			holder = h.Name
		}
	}
	if holder == "" {
		t.Fatal("no host holds the VIP")
	}
	// host-1, kubeadm init's master, is removed first (the VIP's holder)
	// or second: its removal's start and end are when the worker that
	// joined on its own address must stay Ready from (checked at the
	// end, 70 s after).
	var h1Start, h1End time.Time
	timed := func(name string, removal func()) {
		start := time.Now()
		removal()
		if name == h1.Name {
			h1Start, h1End = start, time.Now()
		}
	}
	// The crash-resume matrix over the removal's steps.
	remove := []string{"remove-replica", "--name", holder, "--drain-grace", "2s", "--yes"}
	timed(holder, func() { crashChain(remove, remove, chainOpts{}) })
	var second string
	for _, h := range []*metallab.Host{h1, h2, h3} {
		if h.Name != holder {
			second = h.Name
			break
		}
	}
	// A pod on second's Node under a PodDisruptionBudget that allows no
	// disruption stops its removal at the Node's drain, before anything
	// else changes; --skip-drain then removes it.
	var via *metallab.Host
	for _, h := range []*metallab.Host{h1, h2, h3} {
		if h.Name != holder && h.Name != second {
			via = h
		}
	}
	budgetLeg(ctx, t, cli, via, second)
	timed(second, func() { hm("remove-replica", "--name", second, "--drain-grace", "2s", "--skip-drain", "--yes") })
	if h1Start.IsZero() || h1End.IsZero() {
		t.Fatalf("%s was not removed (the holder %s, then %s)", h1.Name, holder, second)
	}
	must(via, "kubectl --kubeconfig /etc/kubernetes/admin.conf delete --wait=false replicaset/hold pdb/hold")
	vip := vipLoad.Stop()
	t.Logf("load on the VIP %s after the failover leg: through rotate-certs and both removals: %+v", vipAddr, vip)
	// Known gaps (issue 24's notes): the last removal takes etcd from 2
	// voters to 1, and the surviving apiserver's /readyz reports etcd
	// not ready for a moment (0–2 kept-alive 500s seen); once, a
	// kept-alive request timed out (1 s) near the end of rotate-certs or
	// the start of the holder's removal (the CLI lines now carry their
	// times to tell which). More than 2 is a regression.
	if n := probeload.Failed(vip); n > 2 {
		t.Errorf("%d requests to the VIP failed: %+v", n, vip)
	}

	var last *metallab.Host
	for _, h := range masters {
		if h.Name != holder && h.Name != second {
			last = h
		}
	}
	if n := must(last, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name | sort | tr '\\n' ' '"); n != "node/"+last.Name+" node/"+worker.Name {
		t.Errorf("Nodes left: %s; want %s's and the worker's", n, last.Name)
	}
	// Master 0 (host-1) is gone, and the VIP's first holder: the worker
	// that joined on master 0's own address still reaches an apiserver.
	workerReady(last, time.Now(), "after the removals of "+holder+" and "+second)
	var end map[string]any
	if err := json.Unmarshal([]byte(hm("--output", "json", "status", "--timeout", "90s")), &end); err != nil {
		t.Fatal(err)
	}
	if ms, _ := end["members"].([]any); len(ms) != 1 || len(asSlice(end["orphans"])) != 0 || len(asSlice(end["replicas"])) != 1 {
		t.Errorf("status after the removals: members %v, orphans %v, replicas %v", end["members"], end["orphans"], end["replicas"])
	}
	// history: who changed the cluster, each run that finished once
	// (a killed run records nothing; its resumed run does).
	cli.historyAtLeast(map[string]int{"add-replica ok": 2, "rotate-certs ok": 1, "remove-replica ok": 2})
	freed := func(name string) {
		t.Helper()
		left := must(lab.Host(name), "find /etc/kubernetes/manifests -name '*.yaml' 2>/dev/null; ls -A /var/lib/etcd 2>/dev/null; cat /var/lib/hamaster/claim 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/' || true")
		if left != "" {
			t.Errorf("freed host %s keeps: %s", name, left)
		}
	}
	freed(holder)
	freed(second)

	handJoinLeg(ctx, t, cli, lab, last, byHand, metalVersion)
	freed(byHand.Name)

	// The worker that joined on host-1's own address (its kubelet moved
	// to the VIP by the conversion) is Ready 70 s after host-1's removal
	// ended, its Lease renewed since, and its Ready condition has not
	// changed since before that removal began: it never went NotReady
	// (the node monitor's grace is 40 s).
	workerReady(last, h1End.Add(70*time.Second), fmt.Sprintf("70 s after %s's removal", h1.Name))
	q := "kubectl --kubeconfig /etc/kubernetes/admin.conf get node " + worker.Name + ` -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastTransitionTime}'`
	if tr, err := time.Parse(time.RFC3339, must(last, q)); err != nil || tr.After(h1Start) {
		t.Errorf("worker %s's Ready condition last changed at %v (%v), after %s's removal began at %s", worker.Name, tr, err, h1.Name, h1Start.UTC().Format(time.RFC3339))
	}
}

// handJoinLeg joins h to the cluster by hand as a control plane, as
// kubeadm's HA page has an operator add one
// (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/high-availability/):
// the packages of the cluster's version installed (version), `kubeadm token create
// --print-join-command` and `kubeadm init phase upload-certs
// --upload-certs` on a master (via), and the printed command run on h
// with --control-plane and the certificate key. status then lists h as
// a replica with its etcd member (hamaster never claimed it: a master
// with no claim is the cluster's, as master 0 is), and remove-replica
// removes it.
func handJoinLeg(ctx context.Context, t *testing.T, cli *labCLI, lab *metallab.Lab, via, h *metallab.Host, version string) {
	t.Helper()
	if err := lab.Install(ctx, h, version); err != nil {
		t.Fatal(err)
	}
	join := cli.must(via, "kubeadm token create --print-join-command")
	lines := strings.Split(cli.must(via, "kubeadm init phase upload-certs --upload-certs"), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	start := time.Now()
	if out, err := cli.sh(h, fmt.Sprintf("%s --control-plane --certificate-key %s --node-name %s --apiserver-advertise-address %s 2>&1", join, key, h.Name, h.Addr)); err != nil {
		t.Fatalf("kubeadm join --control-plane by hand on %s: %v\n%s", h.Name, err, out)
	}
	t.Logf("kubeadm join --control-plane by hand on %s: %s", h.Name, time.Since(start).Round(100*time.Millisecond))
	type view struct {
		Replicas []struct {
			Name string `json:"name"`
		} `json:"replicas"`
		Members []any `json:"members"`
	}
	names := func(v view) (n []string) {
		for _, r := range v.Replicas {
			n = append(n, r.Name)
		}
		return n
	}
	// status may exit 3: HAProxy has no backend on h (no hamaster step
	// added one), which status reports.
	status := func() (v view) {
		t.Helper()
		cli.status(&v)
		return v
	}
	if v := status(); !slices.Equal(names(v), []string{via.Name, h.Name}) && !slices.Equal(names(v), []string{h.Name, via.Name}) || len(v.Members) != 2 {
		t.Fatalf("status after the join by hand on %s: replicas %v, %d members; want it and %s, 2 members", h.Name, names(v), len(v.Members), via.Name)
	}
	cli.hm("remove-replica", "--name", h.Name, "--drain-grace", "2s", "--yes")
	if v := status(); !slices.Equal(names(v), []string{via.Name}) || len(v.Members) != 1 {
		t.Errorf("status after the removal of %s: replicas %v, %d members; want %s alone, 1 member", h.Name, names(v), len(v.Members), via.Name)
	}
}

// budgetLeg puts a running pod on victim's Node under a
// PodDisruptionBudget that allows no disruption (a ReplicaSet's pod bound
// to the Node; its status set Running and Ready through the API, as a
// kubelet reports it: the test bed's kubelet runs static pods only, and
// the eviction API lets a Pending pod go whatever its budget), then
// checks that remove-replica of victim is refused at the Node's drain
// (exit 3) naming the budget, with nothing changed: the replica, its
// member and its Node still there, the Node schedulable again.
func budgetLeg(ctx context.Context, t *testing.T, cli *labCLI, via *metallab.Host, victim string) {
	t.Helper()
	kubectl := "kubectl --kubeconfig /etc/kubernetes/admin.conf "
	cli.must(via, kubectl+"get node "+victim)
	cli.must(via, "cat <<'EOF' | "+kubectl+"apply -f -\n"+`apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: hold, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: hold}}
  template:
    metadata: {labels: {app: hold}}
    spec:
      nodeName: `+victim+`
      tolerations: [{operator: Exists}]
      containers: [{name: hold, image: registry.k8s.io/pause:3.10}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: hold, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: hold}}
EOF`)
	var pod string
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := wait.Until(pctx, time.Second, "the ReplicaSet's pod, Running and Ready, its budget allowing no disruption (a hang guard of 3 min)", func() (bool, error) {
		pod, _ = cli.sh(via, kubectl+"get pods -l app=hold -o jsonpath='{.items[0].metadata.name}'")
		if pod == "" {
			return false, nil
		}
		now := time.Now().UTC().Format(time.RFC3339)
		if _, err := cli.sh(via, kubectl+"patch pod "+pod+" --subresource=status --type=merge -p '"+
			`{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"`+now+`"}]}}'`); err != nil {
			return false, nil
		}
		allowed, _ := cli.sh(via, kubectl+"get pdb hold -o jsonpath='{.status.currentHealthy}/{.status.disruptionsAllowed}'")
		return allowed == "1/0", nil
	}); err != nil {
		t.Fatal(err)
	}
	cmd, out := cli.command(nil, "remove-replica", "--name", victim, "--drain-grace", "2s", "--drain-timeout", "15s", "--yes")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out.String(), "PodDisruptionBudget default/hold") || !strings.Contains(out.String(), "pod default/"+pod) {
		t.Fatalf("remove-replica of %s with a pod its budget holds: %v, want exit 3 naming the pod and its budget\n%s", victim, err, out)
	}
	t.Logf("remove-replica of %s refused at the drain: %s", victim, lastLine(out.String()))
	if n := cli.must(via, kubectl+"get nodes -l node-role.kubernetes.io/control-plane -o name | wc -l"); n != "2" {
		t.Errorf("control-plane Nodes after the refused removal: %s, want 2", n)
	}
	if u := cli.must(via, kubectl+"get node "+victim+" -o jsonpath='{.spec.unschedulable}'"); u == "true" {
		t.Errorf("the refused drain left %s cordoned", victim)
	}
	var st struct {
		Replicas []any `json:"replicas"`
		Members  []any `json:"members"`
	}
	// status may exit 3 here (the removal's run is unfinished): its
	// answer is what counts.
	cli.status(&st)
	if len(st.Replicas) != 2 || len(st.Members) != 2 {
		t.Errorf("status after the refused removal: %d replicas, %d members; want 2 and 2", len(st.Replicas), len(st.Members))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
