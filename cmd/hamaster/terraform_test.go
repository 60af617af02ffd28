package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/tfexternal"
)

// execStdin runs the built hamaster binary as Terraform's external provider
// does: its own process, the query on stdin, stdout and stderr captured.
// (The protocol is about a process: its exit status and its two streams.)
func execStdin(t *testing.T, bin string, environ []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// stoppedLocalCluster writes the state of a local cluster whose only
// replica is not running (as after a host reboot): the provider opens, but
// etcd cannot be reached. Built from the local provider's files, so the
// "unreachable" case needs no processes.
func stoppedLocalCluster(t *testing.T, stateDir, name string) {
	t.Helper()
	dir := filepath.Join(stateDir, name)
	files := map[string]string{
		"cluster.json":   `{"name":"` + name + `","subnet":253,"static_ip":"127.0.253.1","created":"2026-01-01T00:00:00Z"}`,
		"addresses.json": `{"` + name + `-master":"127.0.253.2"}`,
		filepath.Join("replicas", name+"-master", "template.json"): `{"version":"v1.30.2"}`,
	}
	ca, err := certs.NewCA(name+"-ca", certs.ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files[filepath.Join("pki", "ca.crt")] = string(ca.CertPEM)
	for f, content := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTerraformProtocolContract: every error of the external data source
// protocol is one line on stderr, nothing on stdout, exit 1.
func TestTerraformProtocolContract(t *testing.T) {
	t.Parallel()
	bin := localtest.HamasterBinary(t)
	dir := t.TempDir()
	stoppedLocalCluster(t, dir, "stopped")
	env := []string{"HOME=" + dir, "HAMASTER_STATE_DIR=" + dir}
	cases := []struct {
		name    string
		environ []string
		global  []string // before the command
		args    []string // after it
		stdin   string
		want    []string
	}{
		{"empty stdin", nil, nil, nil, "", []string{"stdin is empty"}},
		{"malformed JSON", nil, nil, nil, `{"cluster":`, []string{"not valid JSON"}},
		{"not JSON at all", nil, nil, nil, `cluster=prod`, []string{"not valid JSON"}},
		{"top-level array", nil, nil, nil, `["prod"]`, []string{"JSON array, not an object"}},
		{"number value", nil, nil, nil, `{"cluster":"prod","replicas":3}`, []string{`"replicas"`, "JSON number"}},
		{"boolean value", nil, nil, nil, `{"cluster":"prod","ha":true}`, []string{`"ha"`, "JSON boolean"}},
		{"null value", nil, nil, nil, `{"cluster":null}`, []string{`"cluster"`, "JSON null"}},
		{"nested value", nil, nil, nil, `{"labels":{"a":"b"}}`, []string{`"labels"`, "JSON object"}},
		{"list value", nil, nil, nil, `{"zones":["a"]}`, []string{`"zones"`, "JSON array"}},
		{"two objects", nil, nil, nil, `{"cluster":"a"}{"cluster":"b"}`, []string{"after the JSON object"}},
		{"duplicate key", nil, nil, nil, `{"cluster":"a","cluster":"b"}`, []string{"twice"}},
		{"unknown provider", nil, nil, nil, `{"cluster":"prod","provider":"azure"}`, []string{`unknown provider "azure"`, "local"}},
		{"bad cluster name", nil, nil, nil, `{"cluster":"Prod_1"}`, []string{"query key cluster", `"Prod_1"`}},
		{"bad next replica name", nil, nil, nil, `{"cluster":"stopped","next_replica_name":"x y"}`, []string{"next_replica_name", `"x y"`}},
		{"cluster not found", nil, nil, nil, `{"cluster":"nope"}`, []string{`"nope" not found`}},
		{"cluster not found in the query's state_dir", nil, nil, nil, `{"cluster":"stopped","state_dir":"` + filepath.Join(dir, "elsewhere") + `"}`, []string{`"stopped" not found`}},
		{"cluster not found, from --cluster", nil, []string{"--cluster", "nope2"}, nil, `{}`, []string{`"nope2" not found`}},
		{"cloud unreachable", nil, nil, nil, `{"cluster":"stopped"}`, []string{"cannot read the etcd members of cluster stopped", "no running replica"}},
		{"positional argument", nil, nil, []string{"extra"}, `{}`, []string{"takes no arguments"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append(append(append([]string{}, c.global...), "terraform"), c.args...)
			code, out, errs := execStdin(t, bin, append(append([]string{}, env...), c.environ...), c.stdin, args...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if out != "" {
				t.Errorf("stdout is not empty: %q", out)
			}
			if !strings.HasPrefix(errs, "hamaster: terraform: ") || !strings.HasSuffix(errs, "\n") || strings.Count(errs, "\n") != 1 {
				t.Errorf("stderr is not one line \"hamaster: terraform: ...\": %q", errs)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr does not contain %q: %q", w, errs)
				}
			}
		})
	}
}

func TestTerraformListedInHelpWithExample(t *testing.T) {
	t.Parallel()
	bin := localtest.HamasterBinary(t)
	env := []string{"HOME=" + t.TempDir()}
	code, out, _ := execStdin(t, bin, env, "", "--help")
	if code != 0 || !regexp.MustCompile(`(?m)^\s+terraform\s+Terraform external data source`).MatchString(out) {
		t.Fatalf("--help (exit %d) does not list terraform:\n%s", code, out)
	}
	code, out, _ = execStdin(t, bin, env, "", "terraform", "--help")
	if code != 0 || !strings.Contains(out, "Example") || !strings.Contains(out, `program = ["hamaster", "terraform"]`) {
		t.Fatalf("terraform --help (exit %d) has no example:\n%s", code, out)
	}
}

// tfRun runs the built binary's terraform command with stdin, as the
// external provider does (environment passed through, stdout captured).
func (c *cliEnv) tfRun(stdin string) (int, string, string) {
	return execStdin(c.t, c.bin, c.env, stdin, "terraform")
}

// tfResult runs hamaster terraform and checks the success side of the
// protocol: exit 0, nothing on stderr, one line holding one JSON object of
// strings with exactly the documented keys.
func (c *cliEnv) tfResult(query map[string]string) map[string]string {
	c.t.Helper()
	q, _ := json.Marshal(query)
	code, out, errs := c.tfRun(string(q))
	if code != 0 || errs != "" {
		c.t.Fatalf("terraform %s: exit %d\nstdout: %s\nstderr: %s", q, code, out, errs)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		c.t.Fatalf("stdout is not one line: %q", out)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		c.t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	res := map[string]string{}
	for k, v := range raw {
		s, ok := v.(string)
		if !ok {
			c.t.Errorf("result %s is a JSON %T, not a string", k, v)
		}
		res[k] = s
	}
	if k := slices.Sorted(maps.Keys(res)); !slices.Equal(k, tfexternal.Keys()) {
		c.t.Fatalf("result keys %v, want %v", k, tfexternal.Keys())
	}
	return res
}

// statusDoc is `hamaster status --output json` decoded.
type statusDoc struct {
	Endpoint     string `json:"endpoint"`
	EndpointKind string `json:"endpoint_kind"`
	StaticIP     string `json:"static_ip"`
	DNSName      string `json:"dns_name"`
	Healthy      bool   `json:"healthy"`
	Replicas     []struct {
		Name    string `json:"name"`
		Address string `json:"address"`
		Version string `json:"version"`
	} `json:"replicas"`
	Members []struct {
		Name     string   `json:"name"`
		PeerURLs []string `json:"peer_urls"`
		Leader   bool     `json:"leader"`
	} `json:"members"`
	Certificates []struct {
		NotAfter time.Time `json:"not_after"`
	} `json:"certificates"`
}

func (c *cliEnv) statusDoc() statusDoc {
	c.t.Helper()
	code, out, errs := c.run(nil, "--output", "json", "status")
	var st statusDoc
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("status (exit %d) is not JSON: %v\n%s\n%s", code, err, out, errs)
	}
	return st
}

// checkAgainstStatus checks every result key against status --output json
// and the CA file.
func checkAgainstStatus(t *testing.T, cluster, stateDir string, res map[string]string, st statusDoc, nextAddr string) {
	t.Helper()
	eq := func(key, want string) {
		t.Helper()
		if res[key] != want {
			t.Errorf("%s = %q, status says %q", key, res[key], want)
		}
	}
	eq("cluster", cluster)
	eq("provider", "local")
	eq("endpoint", st.Endpoint)
	eq("endpoint_kind", st.EndpointKind)
	eq("static_ip", st.StaticIP)
	eq("dns_name", st.DNSName)
	eq("healthy", strconv.FormatBool(st.Healthy))
	var names, addrs, pairs, versions []string
	for _, r := range st.Replicas {
		names = append(names, r.Name)
		addrs = append(addrs, r.Address)
		pairs = append(pairs, r.Name+"="+r.Address)
		if !slices.Contains(versions, r.Version) {
			versions = append(versions, r.Version)
		}
	}
	sort.Strings(names)
	sort.Strings(addrs)
	sort.Strings(versions)
	eq("replicas", strings.Join(names, ","))
	eq("replica_addresses", strings.Join(addrs, ","))
	eq("replica_map", strings.Join(pairs, ",")) // status lists replicas sorted by name
	eq("replica_count", strconv.Itoa(len(st.Replicas)))
	eq("versions", strings.Join(versions, ","))
	leader := ""
	var peers []string
	for _, m := range st.Members {
		if m.Leader {
			leader = m.Name
		}
		peers = append(peers, m.Name+"="+m.PeerURLs[0])
	}
	sort.Slice(peers, func(i, j int) bool { return strings.Split(peers[i], "=")[0] < strings.Split(peers[j], "=")[0] })
	eq("leader", leader)
	eq("etcd_initial_cluster_existing", strings.Join(peers, ","))
	eq("etcd_initial_cluster_state", "existing")
	next := res["next_replica_name"]
	if !regexp.MustCompile(`^`+cluster+`-master-[0-9a-f]{3}$`).MatchString(next) || slices.Contains(names, next) {
		t.Errorf("next_replica_name %q is not a free <cluster>-master-<3 hex> name (replicas %v)", next, names)
	}
	if nextAddr == "" {
		eq("etcd_initial_cluster", res["etcd_initial_cluster_existing"])
		eq("next_replica_peer_url", "")
	} else {
		url := "https://" + nextAddr + ":2380"
		all := append(slices.Clone(peers), next+"="+url)
		sort.Slice(all, func(i, j int) bool { return strings.Split(all[i], "=")[0] < strings.Split(all[j], "=")[0] })
		eq("etcd_initial_cluster", strings.Join(all, ","))
		eq("next_replica_peer_url", url)
	}
	var earliest time.Time
	for _, c := range st.Certificates {
		if earliest.IsZero() || c.NotAfter.Before(earliest) {
			earliest = c.NotAfter
		}
	}
	eq("cert_expiry", earliest.UTC().Format(time.RFC3339))
	caPEM, err := os.ReadFile(filepath.Join(stateDir, cluster, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	sum := sha256.Sum256(block.Bytes)
	eq("ca_cert_sha256", hex.EncodeToString(sum[:]))
}

// stateFiles lists the cluster's state files with the content of those
// hamaster itself writes (processes' logs and status files change on
// their own).
func stateFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	walkState(t, dir, func(p, rel string, d fs.DirEntry) error {
		files[rel] = ""
		if !d.IsDir() && (strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".crt")) && !strings.HasSuffix(p, "status.json") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files[rel] = string(b)
		}
		return nil
	})
	return files
}

// TestTerraformMatchesStatusOnLiveClusters runs `hamaster terraform` as
// Terraform would against a live local cluster of 1, 2 and 3 replicas and
// checks every key against `hamaster status --output json`; the next
// replica's values are passed back to add-replica, and the replica it
// creates boots with exactly the etcd_initial_cluster reported before.
func TestTerraformMatchesStatusOnLiveClusters(t *testing.T) {
	t.Parallel()
	const cluster = "tf"
	c := newCLIEnv(t, cluster)
	var stateDir string
	for _, kv := range c.env { // the last one wins, as in the process
		if v, ok := strings.CutPrefix(kv, "HAMASTER_STATE_DIR="); ok {
			stateDir = v
		}
	}
	subnet := c.subnet
	if code, out, errs := c.run(nil, "local", "up", "--subnet", strconv.Itoa(subnet), "--etcd-heartbeat-ms", "50", "--etcd-election-ms", "500"); code != 0 {
		t.Fatalf("local up: exit %d\n%s\n%s", code, out, errs)
	}
	addr := func(x int) string { return fmt.Sprintf("127.0.%d.%d", subnet, x) }

	// 1 replica. The local provider reserves the lowest free address, so
	// the next replica will get .3: the operator's "reserved address".
	before := stateFiles(t, filepath.Join(stateDir, cluster))
	res := c.tfResult(map[string]string{"cluster": cluster, "provider": "local", "state_dir": stateDir, "next_replica_address": addr(3)})
	checkAgainstStatus(t, cluster, stateDir, res, c.statusDoc(), addr(3))
	if res["replica_count"] != "1" || res["endpoint_kind"] != "ip" || res["healthy"] != "true" {
		t.Fatalf("1 replica: %v", res)
	}
	// Read-only: nothing of the cluster's state changed (no journal, no
	// lock record, no snapshot, no reservation).
	if after := stateFiles(t, filepath.Join(stateDir, cluster)); !maps.Equal(before, after) {
		t.Errorf("hamaster terraform changed the state dir:\nbefore %v\nafter  %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	// Same answer on the next refresh: stable plans.
	if again := c.tfResult(map[string]string{"cluster": cluster, "state_dir": stateDir, "next_replica_address": addr(3)}); !maps.Equal(res, again) {
		t.Errorf("second read differs:\n%v\n%v", res, again)
	}
	// The query's provider settings are accepted and do not matter locally;
	// defaults come from the environment like for every command.
	if other := c.tfResult(map[string]string{"project": "p", "region": "r", "zone": "z", "aws_region": "a"}); other["etcd_initial_cluster_existing"] != res["etcd_initial_cluster_existing"] {
		t.Errorf("defaults from the environment: %v", other)
	}

	// Add the next replica under the reported name; it must boot with the
	// reported etcd_initial_cluster.
	next := res["next_replica_name"]
	if code, out, errs := c.run(nil, "add-replica", "--name", next, "--yes"); code != 0 {
		t.Fatalf("add-replica --name %s: exit %d\n%s\n%s", next, code, out, errs)
	}
	var tmpl struct {
		Env map[string]string `json:"env"`
	}
	b, err := os.ReadFile(filepath.Join(stateDir, cluster, "replicas", next, "template.json"))
	if err != nil || json.Unmarshal(b, &tmpl) != nil {
		t.Fatalf("template of %s: %v", next, err)
	}
	if got := tmpl.Env["INITIAL_ETCD_CLUSTER"]; got != res["etcd_initial_cluster"] {
		t.Errorf("%s booted with INITIAL_ETCD_CLUSTER %q; terraform reported %q", next, got, res["etcd_initial_cluster"])
	}
	if got := tmpl.Env["ETCD_INITIAL_CLUSTER_STATE"]; got != res["etcd_initial_cluster_state"] {
		t.Errorf("%s booted with ETCD_INITIAL_CLUSTER_STATE %q; terraform reported %q", next, got, res["etcd_initial_cluster_state"])
	}

	// 2 replicas: behind the LB now. With the same query the created
	// replica is recognised by its address: nothing the VM was given changes.
	res2 := c.tfResult(map[string]string{"cluster": cluster, "state_dir": stateDir, "next_replica_address": addr(3)})
	if res2["next_replica_name"] != next || res2["etcd_initial_cluster"] != res["etcd_initial_cluster"] || res2["endpoint_kind"] != "lb" || res2["replica_count"] != "2" {
		t.Errorf("after creating %s the same query reports %v", next, res2)
	}
	res2 = c.tfResult(map[string]string{"cluster": cluster, "state_dir": stateDir})
	st := c.statusDoc()
	checkAgainstStatus(t, cluster, stateDir, res2, st, "")

	// 3 replicas, endpoint behind a DNS name.
	if code, out, errs := c.run(nil, "add-replica", "--name", res2["next_replica_name"], "--dns-name", "api.tf.example", "--yes"); code != 0 {
		t.Fatalf("add-replica: exit %d\n%s\n%s", code, out, errs)
	}
	res3 := c.tfResult(map[string]string{"cluster": cluster, "state_dir": stateDir, "next_replica_address": addr(5)})
	checkAgainstStatus(t, cluster, stateDir, res3, c.statusDoc(), addr(5))
	if res3["replica_count"] != "3" || res3["endpoint_kind"] != "dns" || res3["dns_name"] != "api.tf.example" || res3["healthy"] != "true" ||
		!strings.Contains(res3["replicas"], res2["next_replica_name"]) {
		t.Fatalf("3 replicas: %v", res3)
	}
}
