package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// stateFingerprint hashes every file of the cluster's state that a change
// would touch (templates, env files, certificates, journals, snapshots,
// reservations, the LB config), leaving out what running processes
// rewrite on their own (logs, status files).
func stateFingerprint(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	walkState(t, dir, func(path, rel string, d fs.DirEntry) error {
		if d.IsDir() {
			if d.Name() == "data" || d.Name() == "member" {
				return filepath.SkipDir // etcd's own files change while it runs
			}
			return nil
		}
		base := d.Name()
		if strings.HasSuffix(base, ".log") || strings.HasPrefix(base, "status") || strings.HasPrefix(base, ".") {
			return nil
		}
		if base == "history.jsonl" {
			return nil // the audit record of a refused run that held the lock; not cluster state
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:8])
		return nil
	})
	return out
}

// walkState calls visit for each file and directory under dir (dir
// included), with its path and its path relative to dir, as
// filepath.WalkDir does; an error fails the test.
func walkState(t *testing.T, dir string, visit func(path, rel string, d fs.DirEntry) error) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		return visit(path, rel, d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func diffFingerprints(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "+"+k)
		}
	}
	sort.Strings(d)
	return d
}

// TestBadInputTable runs every bad input against a live one-replica local
// cluster: each exits with the expected code, its error names the problem,
// and the cluster's state is byte-for-byte what it was.
func TestBadInputTable(t *testing.T) {
	t.Parallel()
	c := newCLIEnv(t, "badtab")
	if code, out, errs := c.run(nil, "local", "up", "--subnet", strconv.Itoa(c.subnet), "--etcd-heartbeat-ms", "50", "--etcd-election-ms", "500"); code != 0 {
		t.Fatalf("local up: exit %d\n%s\n%s", code, out, errs)
	}
	stateDir := ""
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "HAMASTER_STATE_DIR="); ok {
			stateDir = v
		}
	}
	notExec := filepath.Join(t.TempDir(), "not-exec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := stateFingerprint(t, stateDir)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"version with a newline", []string{"rolling-upgrade", "--version", "v1.31.0\nEVIL=1", "--yes"}, 2, "control characters"},
		{"version not semantic", []string{"rolling-upgrade", "--version", "vbanana", "--yes"}, 2, "not a Kubernetes version"},
		{"version without v", []string{"rolling-upgrade", "--version", "1.31.0", "--yes"}, 2, "must start with v"},
		{"downgrade", []string{"rolling-upgrade", "--version", "v1.29.9", "--yes"}, 2, "--allow-downgrade"},
		{"minor skip", []string{"rolling-upgrade", "--version", "v1.32.0", "--yes"}, 2, "--allow-skew"},
		{"major change", []string{"rolling-upgrade", "--version", "v2.0.0", "--yes"}, 2, "--allow-skew"},
		{"zero health timeout", []string{"rolling-upgrade", "--version", "v1.31.0", "--health-timeout", "0s", "--yes"}, 2, "--health-timeout"},
		{"extra-args not a flag", []string{"rolling-upgrade", "--version", "v1.31.0", "--extra-args", "v=2", "--yes"}, 2, "--extra-args"},
		{"bad strategy", []string{"rolling-upgrade", "--version", "v1.31.0", "--strategy", "blue-green", "--yes"}, 2, "--strategy"},
		{"upgrade positional arg", []string{"rolling-upgrade", "--version", "v1.31.0", "--yes", "now"}, 2, "no positional arguments"},
		{"negative timeout", []string{"add-replica", "--timeout", "-5s", "--yes"}, 2, "--timeout: -5s must be positive"},
		{"zero timeout", []string{"add-replica", "--timeout", "0s", "--yes"}, 2, "--timeout"},
		{"existing replica name", []string{"add-replica", "--name", "badtab-master", "--yes"}, 2, "replica badtab-master already exists"},
		{"bad replica name", []string{"add-replica", "--name", "Bad_Name", "--yes"}, 2, "--name"},
		{"bad dns name", []string{"add-replica", "--dns-name", "api..example.test", "--yes"}, 2, "--dns-name"},
		{"dns name with underscore", []string{"add-replica", "--dns-name", "api_x.example.test", "--yes"}, 2, "--dns-name"},
		{"empty dns name", []string{"add-replica", "--dns-name", "", "--yes"}, 2, "--dns-name"},
		{"node binary missing", []string{"add-replica", "--node-binary", "/nonexistent/hamaster-node", "--yes"}, 2, "--node-binary"},
		{"node binary not executable", []string{"add-replica", "--node-binary", notExec, "--yes"}, 2, "not an executable"},
		{"unknown dns driver", []string{"add-replica", "--dns", "bind9", "--yes"}, 2, "bind9"},
		{"add positional arg", []string{"add-replica", "extra", "--yes"}, 2, "no positional arguments"},
		{"remove positional arg", []string{"remove-replica", "--name", "badtab-master", "badtab-master", "--yes"}, 2, "no positional arguments"},
		{"remove negative timeout", []string{"remove-replica", "--name", "badtab-master", "--timeout", "-1s", "--yes"}, 2, "--timeout"},
		{"status negative timeout", []string{"status", "--timeout", "-1s"}, 2, "--timeout"},
		{"status positional arg", []string{"status", "all"}, 2, "no positional arguments"},
		{"local down without --yes", []string{"local", "down"}, 2, "--yes"},
		{"local up bad version", []string{"local", "up", "--version", "v1.30"}, 2, "--version"},
		{"local up bad subnet", []string{"local", "up", "--subnet", "300"}, 2, "--subnet"},
		{"keep-snapshots zero", []string{"add-replica", "--keep-snapshots", "0", "--yes"}, 2, "--keep-snapshots"},
		{"member-id not hex", []string{"remove-replica", "--member-id", "xyz", "--yes"}, 2, "--member-id"},
		{"member-id and name", []string{"remove-replica", "--member-id", "1a2b", "--name", "badtab-master", "--yes"}, 2, "exclude each other"},
		{"member-id of no member", []string{"remove-replica", "--member-id", "1a2b", "--yes"}, 2, "no etcd member 1a2b"},
		{"member-id of a replica's member", []string{"remove-replica", "--member-id", "MASTERID", "--yes"}, 2, "belongs to replica badtab-master"},
		{"recover without --from", []string{"recover", "--yes"}, 2, "--from"},
		{"recover unknown replica", []string{"recover", "--from", "badtab-master-zzz", "--yes"}, 2, "--from"},
		{"recover missing snapshot", []string{"recover", "--from", "badtab-master", "--snapshot", "/nonexistent.db", "--yes"}, 2, "--snapshot"},
		{"recover with quorum", []string{"recover", "--from", "badtab-master", "--yes"}, 3, "still has a quorum"},
		{"rotate bad window", []string{"rotate-certs", "--expiring-within", "-3d", "--yes"}, 2, "--expiring-within"},
		{"kubeconfig without validity", []string{"kubeconfig", "--validity", "0s"}, 2, "--validity 0s: want more than 0"},
		{"kubeconfig past a year", []string{"kubeconfig", "--validity", "8761h"}, 2, "--validity 8761h0m0s: want more than 0 and at most 8760h0m0s"},
		{"kubeconfig empty user", []string{"kubeconfig", "--client-name", ""}, 2, "--user: empty"},
		{"local up bad election", []string{"local", "up", "--etcd-heartbeat-ms", "100", "--etcd-election-ms", "200"}, 2, "--etcd-election-ms"},
		{"no changes without --yes", []string{"add-replica"}, 2, "--yes"},
		{"unknown flavor", []string{"--flavor", "kops", "status"}, 2, `--flavor "kops": want one of hamaster, kubeadm, kubeup`},
		{"kube-up flavor on hamaster's masters", []string{"--flavor", "kubeup", "add-replica", "--yes"}, 2, "--flavor kubeup: the local provider has no way into its machines"},
	}
	st := c.status()
	masterID := ""
	for _, m := range st["members"].([]any) {
		if mm := m.(map[string]any); mm["name"] == "badtab-master" {
			masterID = fmt.Sprint(mm["id"])
		}
	}
	for _, tc := range cases {
		for i, a := range tc.args {
			if a == "MASTERID" {
				tc.args[i] = masterID
			}
		}
		code, out, errs := c.run(nil, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: %q: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.name, tc.args, code, tc.code, tc.want, out, errs)
		}
		if d := diffFingerprints(before, stateFingerprint(t, stateDir)); len(d) != 0 {
			t.Fatalf("%s: changed the state: %v", tc.name, d)
		}
		t.Logf("| %s | `%s` | %d | %s |", tc.name, strings.ReplaceAll(strings.Join(tc.args, " "), "\n", `\n`), code, strings.TrimSpace(strings.TrimPrefix(errs, "hamaster: ")))
	}
	if st := c.status(); len(st["replicas"].([]any)) != 1 || st["healthy"] != true {
		t.Fatalf("cluster changed or unhealthy after the bad inputs: %v", st)
	}
}
