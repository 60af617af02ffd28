//go:build metallab

// The metal lab's tier ('make test-metal', as root): the real CLI on the
// metal provider's hosts, against masters built by the real kubeadm.

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// failed → rolling-upgrade with a refused flag, then to an unstartable
// release (each rolled back: 3/3 healthy at the old version again, the
// time from the failure logged) → rolling-upgrade to v1.34.4 under the VIP's load
// (killed after each of its steps in turn and resumed each time) →
// rotate-certs (kubeadm certs renew on each master in turn) →
// remove-replica of the VIP's holder (a planned handoff; killed after
// each of its steps in turn and resumed each time) and of another → one master
// left, no member or Node of the others, the freed hosts clean.
func TestMetalKubeadmEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	// Two versions: a copy of links, so that one release can be made
	// unstartable (in o.BinDir).
	// Three hosts for masters, a fourth that an operator joins by hand
	// as a control plane at the end (handJoinLeg), and a worker (the
	// inventory's role: worker, the last host), joined before the
	// conversion.
	o := metallabtest.KubeadmOptions(t, 5, metalVersion, metalUpgradeTo)
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
	caPEM := must(h1, "cat /etc/kubernetes/pki/ca.crt")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("master 0's ca.crt holds no certificate")
	}
	// The old address is verified for its IP, the VIP for the VIP: each
	// name must be in the apiserver's certificate.
	tlsFor := func() *tls.Config { return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} }

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

	upgradeLeg(ctx, t, cli, o.BinDir, func(cmd string) string { return must(h1, cmd) },
		[]string{h1.Addr.String(), h2.Addr.String(), h3.Addr.String()}, tlsFor())

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
	t.Logf("load on the VIP %s after the failover leg: through the upgrades and both removals: %+v", vipAddr, vip)
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
	var hist struct {
		Runs []struct {
			Workflow string `json:"workflow"`
			Result   string `json:"result"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(hm("--output", "json", "history")), &hist); err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, r := range hist.Runs {
		runs[r.Workflow+" "+r.Result]++
	}
	for k, min := range map[string]int{"add-replica ok": 2, "rolling-upgrade rolled-back": 2, "rolling-upgrade ok": 1, "rotate-certs ok": 1, "remove-replica ok": 2} {
		if runs[k] < min {
			t.Errorf("history: %d runs %s, want at least %d (all: %v)", runs[k], k, min, runs)
		}
	}
	t.Logf("history: %v", runs)
	freed := func(name string) {
		t.Helper()
		left := must(lab.Host(name), "find /etc/kubernetes/manifests -name '*.yaml' 2>/dev/null; ls -A /var/lib/etcd 2>/dev/null; cat /var/lib/hamaster/claim 2>/dev/null; ip -o addr show | grep -F ' "+lab.VIP.String()+"/' || true")
		if left != "" {
			t.Errorf("freed host %s keeps: %s", name, left)
		}
	}
	freed(holder)
	freed(second)

	handJoinLeg(ctx, t, cli, lab, last, byHand)
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
// the packages of the cluster's version installed, `kubeadm token create
// --print-join-command` and `kubeadm init phase upload-certs
// --upload-certs` on a master (via), and the printed command run on h
// with --control-plane and the certificate key. status then lists h as
// a replica with its etcd member (hamaster never claimed it: a master
// with no claim is the cluster's, as master 0 is), and remove-replica
// removes it.
func handJoinLeg(ctx context.Context, t *testing.T, cli *labCLI, lab *metallab.Lab, via, h *metallab.Host) {
	t.Helper()
	if err := lab.Install(ctx, h, metalUpgradeTo); err != nil {
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

// upgradeLeg is the walk's rolling-upgrade part, on 3 masters at
// metalVersion: an upgrade whose apiserver refuses a flag, and one to a
// release whose apiserver cannot start, are each stopped and rolled back
// (3 masters healthy at metalVersion again after the failure the CLI
// reports, as each master's own /readyz and /version show; the time from
// the failure is a speed figure, logged: make bench's
// BenchmarkBadFlagRollback measures a rollback's time); then the upgrade
// to metalUpgradeTo, one master at a time.
// run runs a shell command on the first master; masters are the three
// masters' addresses.
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

func upgradeLeg(ctx context.Context, t *testing.T, cli *labCLI, binDir string, run func(string) string, masters []string, tlsCfg *tls.Config) {
	t.Helper()
	command := cli.command
	// healthy waits until status sees 3 masters healthy at want and
	// returns when that was first seen.
	healthy := func(want string) time.Time {
		t.Helper()
		var last string
		err := wait.Until(ctx, 500*time.Millisecond, "3 masters healthy at "+want, func() (bool, error) {
			cmd, out := command(nil, "--output", "json", "status", "--timeout", "90s")
			cmd.Stderr = io.Discard // "not healthy" while a master is not
			_ = cmd.Run()           // exit 3 meanwhile
			var st struct {
				Replicas []struct {
					Name    string `json:"name"`
					Healthy bool   `json:"healthy"`
					Version string `json:"version"`
				} `json:"replicas"`
			}
			if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
				return false, fmt.Errorf("status: %w\n%s", err, out)
			}
			last = fmt.Sprintf("%+v", st.Replicas)
			n := 0
			for _, r := range st.Replicas {
				if r.Healthy && r.Version == want {
					n++
				}
			}
			return n == 3, nil
		})
		if err != nil {
			t.Fatalf("%v (last: %s)", err, last)
		}
		return time.Now()
	}
	// allHealthy reports whether every master's own apiserver answers
	// /readyz 200 and /version at want.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	allHealthy := func(want string) bool {
		for _, a := range masters {
			if probeload.Get(ctx, hc, "https://"+net.JoinHostPort(a, "6443")+"/readyz") != nil {
				return false
			}
			var v struct {
				GitVersion string `json:"gitVersion"`
			}
			if err := probeload.GetJSON(ctx, hc, "https://"+net.JoinHostPort(a, "6443")+"/version", &v); err != nil || v.GitVersion != want {
				return false
			}
		}
		return true
	}
	// failed runs an upgrade that must fail on the new apiserver and be
	// rolled back: from the moment its output says the apiserver cannot
	// start to 3/3 healthy at metalVersion (the masters' own /readyz and
	// /version, polled while the CLI still runs: it waits for the LB too
	// before it exits), at most 30 s; then status agrees.
	failed := func(what string, args ...string) {
		t.Helper()
		cmd, out := command(nil, append([]string{"rolling-upgrade", "--version", metalUpgradeTo, "--drain-grace", "2s"}, append(args, "--log-level", "info", "--yes")...)...)
		defer func() {
			if t.Failed() {
				t.Logf("rolling-upgrade with %s, its output:\n%s", what, out)
			}
		}()
		noticed := &firstLine{match: "the new kube-apiserver cannot start", w: out, seen: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = noticed, noticed
		// From the failure on: the first poll at which all three are
		// healthy again, after one at which they were not.
		back := make(chan time.Time, 1)
		pctx, stopPoll := context.WithCancel(ctx)
		defer stopPoll()
		go func() {
			select {
			case <-noticed.seen:
			case <-pctx.Done():
				return
			}
			sawDown := false
			for pctx.Err() == nil {
				if !allHealthy(metalVersion) {
					sawDown = true
				} else if sawDown {
					back <- time.Now()
					return
				}
				select {
				case <-pctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		if err := cmd.Run(); err == nil {
			t.Fatalf("rolling-upgrade with %s succeeded:\n%s", what, out)
		}
		ended := time.Now()
		if noticed.at.IsZero() {
			t.Fatalf("rolling-upgrade with %s: its output never says the new apiserver cannot start:\n%s", what, out)
		}
		if !strings.Contains(out.String(), "rolled back") && !strings.Contains(out.String(), "rollback") {
			t.Errorf("rolling-upgrade with %s: its output says nothing of a rollback:\n%s", what, out)
		}
		var ok time.Time
		select {
		case ok = <-back:
		case <-time.After(time.Minute):
			// The CLI exits once its rollback passed its health gate:
			// healthy at once is expected.
			t.Fatalf("hang guard: rolling-upgrade with %s: the three masters not healthy at %s a minute after the CLI exited", what, metalVersion)
		}
		statusOK := healthy(metalVersion)
		took := ok.Sub(noticed.at)
		t.Logf("rolling-upgrade with %s: failed after %s; 3/3 healthy at %s %s after the failure was reported (the CLI exited %s after it; status saw 3/3 %s after it)", what, noticed.at.Sub(start).Round(100*time.Millisecond), metalVersion, took.Round(100*time.Millisecond), ended.Sub(noticed.at).Round(100*time.Millisecond), statusOK.Sub(noticed.at).Round(100*time.Millisecond))
		// The kubeadm that was stopped is gone: left running, its own
		// 5-minute wait would end by moving its backup manifest over
		// the next upgrade's (Debian's sh once read the stop's kill as
		// a bad number and signalled nothing). The lab's hosts share
		// this machine's pids, not its mounts: a kubeadm of another
		// host or lab (.ci/run runs labs side by side) is not counted.
		if ps := run(`me=$(readlink /proc/self/ns/mnt); for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = kubeadm ] && [ "$(readlink $d/ns/mnt 2>/dev/null)" = "$me" ] && echo "pid ${d#/proc/}: $(tr '\0' ' ' < $d/cmdline)"; done; true`); ps != "" {
			t.Errorf("rolling-upgrade with %s: kubeadm still runs after the rollback: %s", what, ps)
		}
		if cfg := run("kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'"); !strings.Contains(cfg, "kubernetesVersion: "+metalVersion) || strings.Contains(cfg, "hamaster-refused-flag") {
			t.Errorf("kubeadm-config after the rollback of %s:\n%s", what, cfg)
		}
	}
	failed("a refused flag", "--extra-args", "--hamaster-refused-flag=1")
	restore := metallabtest.Unstartable(t, binDir, metalUpgradeTo)
	failed("an unstartable release")
	restore()

	// The crash-resume matrix over the upgrade's steps: killed after a
	// shard of the first master's (kubeadm upgrade apply) and the
	// second's (kubeadm upgrade node), chosen from the commit so that
	// successive commits take the shards in turn (the converting add and
	// the holder's removal, above and below, are crashed after every
	// step every run), resumed by the same command each time.
	start := time.Now()
	// --drain-grace 2s, as the failed upgrades and rotate-certs: a scale
	// knob (the load's requests are short; the default 10 s is for
	// watches), every step still taken.
	upgrade := []string{"rolling-upgrade", "--version", metalUpgradeTo, "--drain-grace", "2s", "--yes"}
	// The third master's steps are the second's (kubeadm upgrade node):
	// run through.
	cli.crashChain(upgrade, upgrade, chainOpts{skip: []string{"replica-3/"}, rotate: []string{"replica-1/", "replica-2/"}})
	t.Logf("rolling-upgrade to %s: 3/3 healthy %s after its start", metalUpgradeTo, healthy(metalUpgradeTo).Sub(start).Round(100*time.Millisecond))
	if v := run("kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[*].status.nodeInfo.kubeletVersion}'"); v != strings.TrimSpace(strings.Repeat(metalUpgradeTo+" ", 3)) {
		t.Errorf("kubelet versions after the upgrade: %s", v)
	}
	if plan := run("kubeadm upgrade plan " + metalUpgradeTo + " --ignore-preflight-errors=" + metallab.IgnorePreflightErrors + " 2>&1 || true"); !strings.Contains(plan, "Cluster version: "+strings.TrimPrefix(metalUpgradeTo, "v")) && !strings.Contains(plan, "Cluster version: "+metalUpgradeTo) {
		t.Errorf("kubeadm upgrade plan does not read the cluster at %s:\n%s", metalUpgradeTo, plan)
	}
}

// firstLine passes writes to w and records when a write first carries
// match.
type firstLine struct {
	match string
	w     io.Writer
	seen  chan struct{} // closed at the match, when not nil
	mu    sync.Mutex
	at    time.Time
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() && strings.Contains(string(p), f.match) {
		f.at = time.Now()
		if f.seen != nil {
			close(f.seen)
		}
	}
	return f.w.Write(p)
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
