package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs/certstest"
	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/internal/wait"
)

func TestRunUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badEnv := filepath.Join(dir, "kube-env")
	if err := os.WriteFile(badEnv, []byte("NODE_NAME: 'x'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	oldEnv := filepath.Join(dir, "old-env")
	if err := os.WriteFile(oldEnv, []byte("NODE_NAME=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeEnv := filepath.Join(dir, "ku-kube-env")
	if err := os.WriteFile(kubeEnv, []byte("INITIAL_ETCD_CLUSTER: 'kubernetes-master'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no args", nil, 2, "usage:"},
		{"help", []string{"help"}, 0, "usage:"},
		{"unknown command", []string{"vm"}, 2, `unknown command "vm"`},
		{"replica without file", []string{"replica"}, 2, "flag is required"},
		{"lb without file", []string{"lb"}, 2, "flag is required"},
		{"unknown flag", []string{"replica", "--nope"}, 2, "flag provided but not defined"},
		{"stray argument", []string{"lb", "--config", "x", "y"}, 2, "unexpected arguments"},
		{"bad log level", []string{"lb", "--config", "x", "--log-level", "loud"}, 2, "--log-level"},
		{"missing env file", []string{"replica", "--env-file", filepath.Join(dir, "nope")}, 2, "no such file"},
		{"invalid env file", []string{"replica", "--env-file", badEnv}, 2, "NODE_ADDRESS"},
		{"env file not kube-env YAML", []string{"replica", "--env-file", oldEnv}, 2, "want a mapping of KEY: 'value' lines"},
		{"kube-up-master without files", []string{"kube-up-master", "--disk", dir}, 2, "--kube-env is required"},
		{"kube-up-master missing kube-env", []string{"kube-up-master", "--kube-env", filepath.Join(dir, "nope"), "--kube-master-certs", kubeEnv, "--disk", dir}, 2, "no such file"},
		{"kube-up-master not in the cluster", []string{"kube-up-master", "--kube-env", kubeEnv, "--kube-master-certs", kubeEnv, "--disk", filepath.Join(dir, "pd"), "--hostname", "kubernetes-master-x1y"},
			2, `does not list this master's hostname \"kubernetes-master-x1y\"`},
		{"kube-up-master without etcd TLS", []string{"kube-up-master", "--kube-env", kubeEnv, "--kube-master-certs", kubeEnv, "--disk", filepath.Join(dir, "pd"), "--hostname", "kubernetes-master"},
			2, "kube-env has no ETCD_CA_CERT"},
		{"missing lb config", []string{"lb", "--config", filepath.Join(dir, "nope.json")}, 2, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stderr)
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("run(%q) = %d, stderr %q; want %d containing %q", tc.args, code, stderr.String(), tc.wantCode, tc.wantErr)
			}
		})
	}
}

func TestRunLBStopsCleanly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, caFile := certstest.WriteCA(t, dir, "test-ca", 0)
	cfg := lbproxy.Config{
		Listen:     "127.0.0.1:0",
		Health:     lbproxy.HealthConfig{CAFile: caFile},
		StatusFile: filepath.Join(dir, "status.json"),
	}
	path := filepath.Join(dir, "lb.json")
	if err := lbproxy.WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() { done <- run(ctx, []string{"lb", "--config", path}, &stderr) }()

	serving, stopWaiting := context.WithTimeout(ctx, 10*time.Second)
	defer stopWaiting()
	if err := wait.Until(serving, 20*time.Millisecond, "the lb to serve", func() (bool, error) {
		st, err := lbproxy.ReadStatus(cfg.StatusFile)
		return err == nil && st.Serving, nil
	}); err != nil {
		t.Fatalf("lb never served; stderr:\n%s", stderr.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lb did not stop")
	}
}
