package gce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// TestFindsMastersByNameWithoutLabels: kube-up labels nothing; its masters
// are MASTER_NAME and MASTER_NAME-xyz (util.sh get-replica-name-regexp).
// Instances are made here with plain Compute calls, never by the provider.
func TestFindsMastersByNameWithoutLabels(t *testing.T) {
	t.Parallel()
	f := gcetest.Fake(t, gcefake.Options{Subnet: 250})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	raw, err := compute.NewInstancesRESTClient(ctx, option.WithEndpoint(f.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, vm := range []struct{ name, zone string }{
		{"kubernetes-master", gcetest.ZoneA}, {"kubernetes-master-a1b", gcetest.ZoneB},
		{"kubernetes-minion-group-x0z1", gcetest.ZoneA}, {"kubernetes-master-ip-check", gcetest.ZoneA},
	} {
		op, err := raw.Insert(ctx, &computepb.InsertInstanceRequest{Project: f.Project(), Zone: vm.zone, InstanceResource: &computepb.Instance{
			Name: proto.String(vm.name), MachineType: proto.String("zones/" + vm.zone + "/machineTypes/e2-standard-2"),
			Tags:              &computepb.Tags{Items: []string{"kubernetes-master"}},
			NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default")}},
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String("projects/cos-cloud/global/images/cos-stable-109")}}},
		}})
		if err != nil {
			t.Fatalf("insert %s: %v", vm.name, err)
		}
		if err := op.Wait(ctx); err != nil {
			t.Fatalf("insert %s: %v", vm.name, err)
		}
	}
	p, err := gce.New(ctx, providers.Settings{Cluster: "kubernetes", StateDir: t.TempDir(), Options: map[string]string{
		gce.OptProject: f.Project(), gce.OptZones: gcetest.ZoneA + "," + gcetest.ZoneB, gce.OptEndpoint: f.URL, remote.OptUser: "unused"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := registry.Open(flavors.KubeUp, p, nil); err != nil { // kube-up's master format
		t.Fatal(err)
	}
	rs, err := p.Instances().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	if len(names) != 2 || names[0] != "kubernetes-master" || names[1] != "kubernetes-master-a1b" {
		t.Fatalf("List = %v, want kube-up's two masters only", names)
	}
	if _, err := p.Instances().Get(ctx, "kubernetes-minion-group-x0z1"); !errors.Is(err, errkind.NotFound) {
		t.Errorf("Get(a node) = %v, want NotFound", err)
	}
	if _, err := p.Instances().ReserveAddress(ctx, "kubernetes-replica-2", ""); !errors.Is(err, errkind.InvalidArgument) {
		t.Errorf("ReserveAddress(a name kube-up would not find) = %v, want InvalidArgument", err)
	}
	if got := f.Names("addresses"); len(got) != 0 {
		t.Errorf("a refused name reserved %v", got)
	}
}
