package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// ownMasters is a provider whose masters are in hamaster's format.
type ownMasters struct{ providers.Provider }

func (ownMasters) Name() string { return "own" }
func (ownMasters) Etcd(context.Context, ...string) (*etcdmember.Client, error) {
	return nil, errors.New("unused")
}

// A cluster's recorded flavor is used without --flavor, and another one
// named is refused, naming the record.
func TestChooseFlavorKeepsTheRecordedOne(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	f, err := chooseFlavor("", state, "c1", ownMasters{}, nil)
	if err != nil || f.Name() != "hamaster" {
		t.Fatalf("no record, no --flavor: %v, %v; want the provider's finding, hamaster", f, err)
	}
	if _, err := os.Stat(workflows.FlavorFile(state, "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("choosing recorded the flavor (only a change does): %v", err)
	}
	if err := os.MkdirAll(filepath.Join(state, "c1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(workflows.FlavorFile(state, "c1"), []byte("hamaster\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := chooseFlavor("hamaster", state, "c1", ownMasters{}, nil); err != nil || f.Name() != "hamaster" {
		t.Fatalf("--flavor as recorded: %v, %v", f, err)
	}
	_, err = chooseFlavor("kubeup", state, "c1", ownMasters{}, nil)
	if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "recorded as hamaster") {
		t.Fatalf("--flavor kubeup on a cluster recorded as hamaster: %v", err)
	}
}
