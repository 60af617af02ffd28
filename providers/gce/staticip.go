package gce

import (
	"context"
	"fmt"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/hamaster/hamaster/errkind"
)

// staticIP implements lb.StaticIP with the cluster's regional EXTERNAL
// address, attached as the natIP of a replica's access config (kube-up's
// attach-external-ip) or used by the forwarding rule.
type staticIP struct{ p *Provider }

// staticAddress returns the address's IP and its users' links.
func (p *Provider) staticAddress(ctx context.Context) (string, []string, error) {
	var a *computepb.Address
	err := retry(ctx, "get static address "+p.staticAddressName(), func(ctx context.Context) error {
		var err error
		a, err = p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: p.project, Region: p.region, Address: p.staticAddressName()})
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return a.GetAddress(), a.GetUsers(), nil
}

// EnsureStaticAddress reserves the cluster's static external address
// (kube-up creates it with the first master) and returns its IP.
func (p *Provider) EnsureStaticAddress(ctx context.Context) (string, error) {
	err := p.mutate(ctx, "reserve static address "+p.staticAddressName(), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return p.addresses.Insert(ctx, &computepb.InsertAddressRequest{Project: p.project, Region: p.region, RequestId: rid, AddressResource: &computepb.Address{
			Name: proto.String(p.staticAddressName()), AddressType: proto.String("EXTERNAL"), Labels: p.labels(),
			Description: proto.String(fmt.Sprintf("hamaster cluster %s: the apiserver endpoint", p.cluster)),
		}})
	})
	if err := ignore(err, errkind.AlreadyExists); err != nil {
		return "", err
	}
	ip, _, err := p.staticAddress(ctx)
	return ip, err
}

// Get implements lb.StaticIP: the holder is the instance among the
// address's users ("" when the forwarding rule or nobody uses it).
func (s *staticIP) Get(ctx context.Context) (string, string, error) {
	ip, users, err := s.p.staticAddress(ctx)
	if err != nil {
		return "", "", err
	}
	for _, u := range users {
		if strings.Contains(u, "/instances/") {
			return ip, lastSeg(u), nil
		}
	}
	return ip, "", nil
}

// Detach implements lb.StaticIP: deleteAccessConfig on the holder, then
// addAccessConfig with an ephemeral IP so the replica keeps an external
// address (kube-up's attach-external-ip). Each waits on its operation,
// which is DONE once the replica no longer answers on the static IP.
func (s *staticIP) Detach(ctx context.Context) error {
	ip, holder, err := s.Get(ctx)
	if err != nil {
		return err
	}
	if holder == "" {
		return s.ensureExternal(ctx)
	}
	x, zone, err := s.p.inst.getRaw(ctx, holder)
	if err != nil {
		return err
	}
	for _, ac := range x.GetNetworkInterfaces()[0].GetAccessConfigs() {
		if ac.GetNatIP() != ip {
			continue
		}
		if err := s.deleteAccessConfig(ctx, holder, zone, ac.GetName()); err != nil {
			return err
		}
	}
	s.p.closeSSH(holder)
	return s.addAccessConfig(ctx, holder, zone, "")
}

// Attach implements lb.StaticIP: the replica's current (ephemeral) access
// config is replaced by one with the static IP.
func (s *staticIP) Attach(ctx context.Context, replica string) error {
	ip, holder, err := s.Get(ctx)
	if err != nil {
		return err
	}
	if holder == replica {
		return nil
	}
	if holder != "" {
		return errkind.Errorf(errkind.FailedPrecondition, "static IP %s is attached to %s; detach it first", ip, holder)
	}
	if _, users, _ := s.p.staticAddress(ctx); len(users) > 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "static IP %s is used by %s; delete the load balancer first", ip, strings.Join(users, ", "))
	}
	x, zone, err := s.p.inst.getRaw(ctx, replica)
	if err != nil {
		return err
	}
	for _, ac := range x.GetNetworkInterfaces()[0].GetAccessConfigs() {
		if err := s.deleteAccessConfig(ctx, replica, zone, ac.GetName()); err != nil {
			return err
		}
	}
	s.p.closeSSH(replica)
	return s.addAccessConfig(ctx, replica, zone, ip)
}

// ensureExternal gives every master without an access config an
// ephemeral external IP: a Detach interrupted between deleting the static
// IP's access config and adding the ephemeral one left its holder
// unreachable over SSH (and so etcd through it) until this re-run.
func (s *staticIP) ensureExternal(ctx context.Context) error {
	xs, err := s.p.inst.listRaw(ctx)
	if err != nil {
		return err
	}
	for _, x := range xs {
		nics := x.GetNetworkInterfaces()
		if len(nics) == 0 || len(nics[0].GetAccessConfigs()) > 0 {
			continue
		}
		if err := s.addAccessConfig(ctx, x.GetName(), lastSeg(x.GetZone()), ""); err != nil {
			return err
		}
	}
	return nil
}

func (s *staticIP) deleteAccessConfig(ctx context.Context, name, zone, ac string) error {
	err := s.p.mutate(ctx, fmt.Sprintf("delete access config of %s", name), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return s.p.instances.DeleteAccessConfig(ctx, &computepb.DeleteAccessConfigInstanceRequest{
			Project: s.p.project, Zone: zone, Instance: name, AccessConfig: ac, NetworkInterface: "nic0", RequestId: rid})
	})
	return ignore(err, errkind.NotFound)
}

func (s *staticIP) addAccessConfig(ctx context.Context, name, zone, natIP string) error {
	ac := &computepb.AccessConfig{Name: proto.String("external-nat"), Type: proto.String("ONE_TO_ONE_NAT")}
	if natIP != "" {
		ac.NatIP = proto.String(natIP)
	}
	return s.p.mutate(ctx, fmt.Sprintf("add access config %s to %s", natIP, name), func(ctx context.Context, rid *string) (*compute.Operation, error) {
		return s.p.instances.AddAccessConfig(ctx, &computepb.AddAccessConfigInstanceRequest{
			Project: s.p.project, Zone: zone, Instance: name, NetworkInterface: "nic0", RequestId: rid, AccessConfigResource: ac})
	})
}
