package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember/etcdtest"
)

// inProcess serialises in-process runs: urfave/cli v2 mutates its shared
// cli.HelpFlag on every App.Run, a race when tests run the CLI in parallel.
var inProcess sync.Mutex

// hm runs the CLI in-process and returns exit code, stdout, stderr.
func hm(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	inProcess.Lock()
	defer inProcess.Unlock()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if environ == nil {
		environ = []string{"HOME=" + t.TempDir()}
	}
	code := run(ctx, append([]string{"hamaster"}, args...), strings.NewReader(""), &out, &errb, environ)
	return code, out.String(), errb.String()
}

func TestEtcdMembersJSONOnRealCluster(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 3, etcdtest.Options{TLS: true})
	code, out, errs := hm(t, nil, "--output", "json", "etcd", "members",
		"--endpoints", strings.Join(ec.Endpoints(), ","), "--cacert", ec.CAFile, "--cert", ec.ClientCertFile, "--key", ec.ClientKeyFile)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Members []struct {
			ID         string   `json:"id"`
			Name       string   `json:"name"`
			PeerURLs   []string `json:"peer_urls"`
			ClientURLs []string `json:"client_urls"`
			Learner    bool     `json:"learner"`
			Leader     bool     `json:"leader"`
			Healthy    bool     `json:"healthy"`
			Version    string   `json:"version"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not the documented JSON: %v\n%s", err, out)
	}
	leaders := 0
	for _, m := range got.Members {
		if m.Leader {
			leaders++
		}
		if m.ID == "" || m.Name == "" || len(m.PeerURLs) == 0 || len(m.ClientURLs) == 0 || !m.Healthy || m.Version != "3.7.3" {
			t.Errorf("member %+v incomplete", m)
		}
	}
	if len(got.Members) != 3 || leaders != 1 {
		t.Fatalf("%d members, %d leaders; want 3 and 1:\n%s", len(got.Members), leaders, out)
	}
	// The text table marks the leader.
	code, out, _ = hm(t, nil, "etcd", "members", "--endpoints", ec.Endpoints()[0], "--cacert", ec.CAFile, "--cert", ec.ClientCertFile, "--key", ec.ClientKeyFile)
	if code != 0 || strings.Count(out, "leader *") != 1 || strings.Count(out, "\n") != 4 {
		t.Fatalf("text table (exit %d):\n%s", code, out)
	}
	// health passes; snapshot writes a file.
	if code, out, errs := hm(t, nil, "etcd", "health", "--endpoints", ec.Endpoints()[1], "--cacert", ec.CAFile, "--cert", ec.ClientCertFile, "--key", ec.ClientKeyFile); code != 0 {
		t.Fatalf("health exit %d: %s %s", code, out, errs)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	if code, out, errs := hm(t, nil, "etcd", "snapshot", "--file", snap, "--endpoints", ec.Endpoints()[2], "--cacert", ec.CAFile, "--cert", ec.ClientCertFile, "--key", ec.ClientKeyFile); code != 0 || !strings.Contains(out, "sha256") {
		t.Fatalf("snapshot exit %d: %s %s", code, out, errs)
	}
	if st, err := os.Stat(snap); err != nil || st.Size() == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v", st, err)
	}
}

func TestEtcdHealthExit3WhenAVoterIsDown(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 3, etcdtest.Options{})
	ec.Stop(t, ec.Members[2].Name)
	code, out, errs := hm(t, nil, "etcd", "health", "--endpoints", ec.Endpoints()[0], "--timeout", "20s")
	if code != 3 || !strings.Contains(errs, "unhealthy") {
		t.Fatalf("exit %d, want 3:\n%s\n%s", code, out, errs)
	}
}

func TestEtcdHealthExit3WhenUnreachable(t *testing.T) {
	t.Parallel()
	ln := etcdtest.Start(t, 1, etcdtest.Options{})
	ep := ln.Endpoints()[0]
	ln.Stop(t, ln.Members[0].Name)
	code, out, errs := hm(t, nil, "etcd", "health", "--endpoints", ep, "--timeout", "5s")
	if code != 3 || !strings.Contains(errs, "unreachable") {
		t.Fatalf("exit %d, want 3:\n%s\n%s", code, out, errs)
	}
}

func TestBadInputExit2NamesTheFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg.yaml")
	os.WriteFile(cfg, []byte("cluster: prod\nprovdier: gce\n"), 0o600)
	goodCfg := filepath.Join(dir, "good.yaml")
	os.WriteFile(goodCfg, []byte("cluster: fromfile\nprovider: aws\n"), 0o600)
	cases := []struct {
		name    string
		environ []string
		args    []string
		want    string
	}{
		{"unknown provider", nil, []string{"--provider", "azure", "status"}, "--provider"},
		{"unknown provider from env", []string{"HAMASTER_PROVIDER=azure"}, []string{"status"}, "--provider"},
		{"malformed endpoint", nil, []string{"etcd", "members", "--endpoints", "not a url"}, "not a url"},
		{"endpoint without port", nil, []string{"etcd", "members", "--endpoints", "ftp://127.0.0.1"}, "ftp://127.0.0.1"},
		{"missing cert file", nil, []string{"etcd", "members", "--endpoints", "https://127.0.0.1:2379", "--cacert", "/nonexistent/ca.crt"}, "/nonexistent/ca.crt"},
		{"missing required endpoints", nil, []string{"etcd", "members"}, "endpoints"},
		{"unknown flag", nil, []string{"status", "--bogus"}, "bogus"},
		{"unknown command", nil, []string{"frobnicate"}, "frobnicate"},
		{"bad output", nil, []string{"--output", "yaml", "status"}, "--output"},
		{"bad log level", nil, []string{"--log-level", "loud", "status"}, "--log-level"},
		{"bad cluster name", nil, []string{"--cluster", "Prod_1", "status"}, "--cluster"},
		{"config typo", nil, []string{"--config", cfg, "status"}, "provdier"},
		{"missing config", nil, []string{"--config", filepath.Join(dir, "nope.yaml"), "status"}, "--config"},
		{"remove without name", nil, []string{"remove-replica"}, "name"},
		{"negative drain grace", nil, []string{"--state-dir", dir, "remove-replica", "--name", "x", "--drain-grace", "-1s"}, "--drain-grace"},
		{"state dir not writable", nil, []string{"--state-dir", filepath.Join(cfg, "sub"), "local", "up"}, "--state-dir"},
		{"bad strategy", nil, []string{"--state-dir", dir, "rolling-upgrade", "--version", "v1.31.0", "--strategy", "blue-green"}, "--strategy"},
		{"upgrade without version", nil, []string{"--state-dir", dir, "rolling-upgrade"}, "--version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"HOME=" + dir}, c.environ...)
			code, out, errs := hm(t, env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Fatalf("stderr does not name %q:\n%s", c.want, errs)
			}
		})
	}
}

func TestPrecedenceFlagEnvFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg.yaml")
	os.WriteFile(cfg, []byte("cluster: fromfile\noutput: json\n"), 0o600)
	cases := []struct {
		environ []string
		args    []string
		want    string
	}{
		{nil, []string{"--config", cfg}, "fromfile"},
		{[]string{"HAMASTER_CLUSTER=fromenv"}, []string{"--config", cfg}, "fromenv"},
		{[]string{"HAMASTER_CLUSTER=fromenv"}, []string{"--config", cfg, "--cluster", "fromflag"}, "fromflag"},
	}
	for _, c := range cases {
		env := append([]string{"HOME=" + dir}, c.environ...)
		args := append(c.args, "--state-dir", dir, "status")
		code, _, errs := hm(t, env, args...)
		// No such cluster: the error names the resolved cluster.
		if code == 0 || !strings.Contains(errs, `"`+c.want+`"`) {
			t.Errorf("%v %v: exit %d, stderr %q; want cluster %q", c.environ, c.args, code, errs, c.want)
		}
	}
}

func TestHelpListsWorkingCommandsWithExamples(t *testing.T) {
	t.Parallel()
	code, out, _ := hm(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, c := range []string{"etcd", "local", "add-replica", "remove-replica", "status"} {
		if !strings.Contains(out, c) {
			t.Errorf("--help lacks %s", c)
		}
	}
	for _, args := range [][]string{{"add-replica", "--help"}, {"remove-replica", "--help"}, {"etcd", "members", "--help"}, {"local", "up", "--help"}} {
		code, out, _ := hm(t, nil, args...)
		if code != 0 || !strings.Contains(out, "Example") {
			t.Errorf("%v: exit %d, no example:\n%s", args, code, out)
		}
	}
}
