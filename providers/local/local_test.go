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
	"github.com/hamaster/hamaster/dataplane/nodeapi"
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

// TestUpControlPlaneRefusedBeforeAnythingChanges: a bad --control-plane,
// or a real control plane whose version has no kube-apiserver binary, is
// an InvalidArgument naming the flag, and no cluster state is written.
func TestUpControlPlaneRefusedBeforeAnythingChanges(t *testing.T) {
	t.Parallel()
	bins := t.TempDir()
	cases := []struct {
		name    string
		o       local.UpOptions
		wantErr []string
	}{
		{"unknown control plane", local.UpOptions{Version: "v1.33.13", ControlPlane: "kind"}, []string{"--control-plane", `"kind"`, "standin", "real"}},
		{"real without a binary", local.UpOptions{Version: "v1.30.2", ControlPlane: "real", KubeAPIServerDir: bins}, []string{"--control-plane real --version v1.30.2", "no kube-apiserver", "make kube-apiserver"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			s := providers.Settings{Cluster: "cp", StateDir: state, Options: map[string]string{local.OptNodeBinary: "/nonexistent"}}
			_, err := local.Up(context.Background(), s, tc.o, func(string) {})
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
			if ents, _ := os.ReadDir(state); len(ents) != 0 {
				t.Errorf("state dir has %v after a refused up; want nothing written", ents)
			}
		})
	}
}

// The real apiserver's --service-cluster-ip-range (the node's default)
// must be the range whose first address the certificates cover.
func TestServiceRangeMatchesCertificates(t *testing.T) {
	t.Parallel()
	if nodeapi.DefaultServiceClusterIPRange != providers.DefaultServiceCIDR {
		t.Fatalf("node's default SERVICE_CLUSTER_IP_RANGE %s, certificates' service range %s: the kubernetes service IP would not be in the apiserver certificate",
			nodeapi.DefaultServiceClusterIPRange, providers.DefaultServiceCIDR)
	}
}
