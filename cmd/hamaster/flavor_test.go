package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// ownMasters is a provider whose masters are in hamaster's format.
type ownMasters struct{ providers.Provider }

func (ownMasters) Name() string { return "own" }
func (ownMasters) Close() error { return nil }
func (ownMasters) Etcd(context.Context, ...string) (*etcdmember.Client, error) {
	return nil, errors.New("unused")
}

// bindFlavor binds cluster's flavor to the provider named provider as
// the CLI does: the flavor file read once (namedFlavor), then
// flavorregistry.Bind on a test registry of ownMasters ("own") and
// kubeadmHosts ("metal").
func bindFlavor(t *testing.T, name, state, cluster, provider string) (flavors.Flavor, error) {
	t.Helper()
	reg := providers.NewRegistry()
	reg.Register("own", func(context.Context, providers.Settings) (providers.Provider, error) { return ownMasters{}, nil })
	reg.Register("metal", func(context.Context, providers.Settings) (providers.Provider, error) { return kubeadmHosts{}, nil })
	named, err := namedFlavor(name, state, cluster)
	if err != nil {
		return nil, err
	}
	_, f, err := flavorregistry.Bind(t.Context(), reg, provider, providers.Settings{Cluster: cluster, StateDir: state, Flavor: named})
	return f, err
}

// recordFlavor records cluster's flavor under state as the workflows do.
func recordFlavor(t *testing.T, state, cluster, flavor string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(state, cluster), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(workflows.FlavorFile(state, cluster), []byte(flavor+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A cluster's recorded flavor is used without --flavor, and another one
// named is refused, naming the record.
func TestBindFlavorKeepsTheRecordedOne(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	f, err := bindFlavor(t, "", state, "c1", "own")
	if err != nil || f.Name() != "hamaster" {
		t.Fatalf("no record, no --flavor: %v, %v; want the provider's finding, hamaster", f, err)
	}
	if _, err := os.Stat(workflows.FlavorFile(state, "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("choosing recorded the flavor (only a change does): %v", err)
	}
	recordFlavor(t, state, "c1", "hamaster")
	if f, err := bindFlavor(t, "hamaster", state, "c1", "own"); err != nil || f.Name() != "hamaster" {
		t.Fatalf("--flavor as recorded: %v, %v", f, err)
	}
	_, err = bindFlavor(t, "kubeup", state, "c1", "own")
	if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "recorded as hamaster") {
		t.Fatalf("--flavor kubeup on a cluster recorded as hamaster: %v", err)
	}
}

// kubeadmHosts is a provider whose hosts run kubeadm's masters (the
// metal provider: MasterFormat "kubeadm") with a way in.
type kubeadmHosts struct{ providers.Provider }

func (kubeadmHosts) Name() string         { return "metal" }
func (kubeadmHosts) Close() error         { return nil }
func (kubeadmHosts) MasterFormat() string { return "kubeadm" }
func (kubeadmHosts) DialMachine(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("unused")
}
func (kubeadmHosts) MachineHostname(string, string) string { return "" }
func (kubeadmHosts) RunOnMachine(context.Context, string, string) ([]byte, []byte, error) {
	return nil, nil, errors.New("unused")
}

// Without --flavor or a record, kubeadm's hosts are the kubeadm flavor's
// (what kubeconfig, status and the first add-replica see before anything
// is recorded); once recorded, the record is used.
func TestBindFlavorFindsKubeadmsMasters(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	f, err := bindFlavor(t, "", state, "lab", "metal")
	if err != nil || f.Name() != "kubeadm" {
		t.Fatalf("no record, no --flavor, kubeadm's hosts: %v, %v; want kubeadm", f, err)
	}
	if _, ok := f.(flavors.ClientIssuer); !ok || flavors.CapabilitiesOf(f).ReplicaCertIssuer != nil {
		t.Errorf("the kubeadm flavor: no ClientIssuer (kubeconfig would look for hamaster's own CA)")
	}
	recordFlavor(t, state, "lab", "kubeadm")
	if f, err := bindFlavor(t, "", state, "lab", "metal"); err != nil || f.Name() != "kubeadm" {
		t.Fatalf("recorded kubeadm, no --flavor: %v, %v", f, err)
	}
}
