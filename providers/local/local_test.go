package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/providers/local/localtest"
	"github.com/hamaster/hamaster/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := localtest.Up(t, "conformance", localtest.Options{})
	pki := filepath.Join(c.Settings.StateDir, c.Settings.Cluster, "pki")
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	master, err := c.Provider.Instances().Get(context.Background(), local.MasterName("conformance"))
	if err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, providertest.Harness{
		Provider: c.Provider,
		Template: func(t *testing.T, name, address string) providers.Template {
			files, err := providers.ReplicaFiles(ca, name, address, certs.APIServerSANs{StaticIP: c.Provider.Info().StaticIP})
			if err != nil {
				t.Fatal(err)
			}
			tmpl := master.Template.Clone()
			tmpl.Files = files
			tmpl.Env[providers.EnvInitialEtcdCluster] = name + "=" + providers.PeerURL(address)
			tmpl.Env[providers.EnvEtcdInitialClusterState] = "new"
			return tmpl
		},
	})
}

func TestStalePIDFileIsNotARunningReplica(t *testing.T) {
	t.Parallel()
	c := localtest.Up(t, "stalepid", localtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := local.MasterName("stalepid")
	// A pid file naming a live process that is not ours (this test).
	pidFile := filepath.Join(c.Settings.StateDir, "stalepid", "replicas", name, "node.pid")
	orig, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := c.Provider.Instances().Get(ctx, name)
	if err != nil || r.Running() {
		t.Fatalf("replica with a stale pid file: %+v, %v; want stopped", r, err)
	}
	if err := os.WriteFile(pidFile, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Provider.Instances().Get(ctx, name); !r.Running() {
		t.Fatalf("replica with its real pid file is %s", r.State)
	}
}

func TestOpenUnknownClusterNamesIt(t *testing.T) {
	t.Parallel()
	_, err := local.New(context.Background(), providers.Settings{Cluster: "nope", StateDir: t.TempDir()})
	if !errors.Is(err, errkind.NotFound) || !strings.Contains(err.Error(), "local up --cluster nope") {
		t.Fatalf("err = %v", err)
	}
}

func TestSubnetConflictRefused(t *testing.T) {
	t.Parallel()
	c := localtest.Up(t, "subnet-a", localtest.Options{})
	s := c.Settings
	s.Cluster = "subnet-b"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := local.Up(ctx, s, local.UpOptions{Version: "v1.30.2"}, func(string) {})
	if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "subnet-a") {
		t.Fatalf("second cluster on the same subnet: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.StateDir, "subnet-b", "replicas")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused up left state behind: %v", err)
	}
}
