package aws

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	r53types "github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/hamaster/hamaster/errkind"
)

// route53Records implements dns.Records with A records in one Route53
// hosted zone. Upsert and Delete return the change's ID; Wait polls
// GetChange (the SDK's ResourceRecordSetsChanged waiter) until INSYNC.
type route53Records struct {
	p    *Provider
	zone string
}

const recordTTL = 60

// Kind implements dns.Records.
func (r *route53Records) Kind() string { return "route53" }

func fqdn(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

// get returns the A record set of name, or nil.
func (r *route53Records) get(ctx context.Context, name string) (*r53types.ResourceRecordSet, error) {
	out, err := r.p.r53.ListResourceRecordSets(ctx, &route53.ListResourceRecordSetsInput{
		HostedZoneId:    aws.String(r.zone),
		StartRecordName: aws.String(fqdn(name)),
		StartRecordType: r53types.RRTypeA,
		MaxItems:        aws.Int32(1),
	})
	if err != nil {
		return nil, mapErr(err, "list records %s in hosted zone %s", name, r.zone)
	}
	for _, rs := range out.ResourceRecordSets {
		if fqdn(aws.ToString(rs.Name)) == fqdn(name) && rs.Type == r53types.RRTypeA {
			return &rs, nil
		}
	}
	return nil, nil
}

// Get implements dns.Records.
func (r *route53Records) Get(ctx context.Context, name string) ([]string, error) {
	rs, err := r.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if rs == nil {
		return nil, errkind.Errorf(errkind.NotFound, "A record %s not found in hosted zone %s", name, r.zone)
	}
	var ips []string
	if rs.AliasTarget != nil {
		// An alias to the NLB: its addresses.
		l, err := r.p.lbal.describeLB(ctx)
		if err != nil {
			return nil, fmt.Errorf("record %s (A) aliases %s: %w", name, aws.ToString(rs.AliasTarget.DNSName), err)
		}
		for _, a := range lbAddresses(l) {
			ips = append(ips, r.p.amap.toNet(a))
		}
	}
	for _, v := range rs.ResourceRecords {
		ips = append(ips, r.p.amap.toNet(aws.ToString(v.Value)))
	}
	sort.Strings(ips)
	return ips, nil
}

func (r *route53Records) change(ctx context.Context, action r53types.ChangeAction, rs r53types.ResourceRecordSet) (string, error) {
	out, err := r.p.r53.ChangeResourceRecordSets(ctx, &route53.ChangeResourceRecordSetsInput{
		HostedZoneId: aws.String(r.zone),
		ChangeBatch: &r53types.ChangeBatch{
			Comment: aws.String("hamaster cluster " + r.p.cluster),
			Changes: []r53types.Change{{Action: action, ResourceRecordSet: &rs}},
		},
	})
	if err != nil {
		return "", mapErr(err, "%s A record %s in hosted zone %s", strings.ToLower(string(action)), aws.ToString(rs.Name), r.zone)
	}
	return aws.ToString(out.ChangeInfo.Id), nil
}

// Upsert implements dns.Records (UPSERT, TTL 60). With the DNS endpoint
// (--aws-endpoint-mode dns) and an active NLB, the record is an alias to
// the NLB instead (Route53 answers with its addresses and takes it out
// when it is unhealthy); before there is one, an A record to ips (master
// 0's Elastic IP).
func (r *route53Records) Upsert(ctx context.Context, name string, ips []string) (string, error) {
	if r.p.dnsEndpoint {
		l, err := r.p.lbal.describeLB(ctx)
		switch {
		case err == nil && l.State != nil && l.State.Code == "active":
			rs := r53types.ResourceRecordSet{Name: aws.String(fqdn(name)), Type: r53types.RRTypeA, AliasTarget: &r53types.AliasTarget{
				DNSName: l.DNSName, HostedZoneId: l.CanonicalHostedZoneId, EvaluateTargetHealth: true}}
			return r.change(ctx, r53types.ChangeActionUpsert, rs)
		case err != nil && !errors.Is(err, errkind.NotFound):
			return "", err
		}
	}
	rs := r53types.ResourceRecordSet{Name: aws.String(fqdn(name)), Type: r53types.RRTypeA, TTL: aws.Int64(recordTTL)}
	sorted := append([]string(nil), ips...)
	sort.Strings(sorted)
	for _, ip := range sorted {
		rs.ResourceRecords = append(rs.ResourceRecords, r53types.ResourceRecord{Value: aws.String(r.p.amap.toCloud(ip))})
	}
	return r.change(ctx, r53types.ChangeActionUpsert, rs)
}

// Delete implements dns.Records. DELETE must name the record exactly as it
// is, so it is read first; an absent record is success with no change to
// wait for ("").
func (r *route53Records) Delete(ctx context.Context, name string) (string, error) {
	rs, err := r.get(ctx, name)
	if err != nil || rs == nil {
		return "", err
	}
	id, err := r.change(ctx, r53types.ChangeActionDelete, *rs)
	if code(err) == "InvalidChangeBatch" {
		// Changed or deleted since we read it: look again.
		if rs, err2 := r.get(ctx, name); err2 == nil && rs == nil {
			return "", nil
		} else if err2 == nil {
			return r.change(ctx, r53types.ChangeActionDelete, *rs)
		}
	}
	return id, err
}

// Wait implements dns.Records: until GetChange reports INSYNC.
func (r *route53Records) Wait(ctx context.Context, changeID string) error {
	if changeID == "" {
		return nil
	}
	w := route53.NewResourceRecordSetsChangedWaiter(r.p.r53, func(o *route53.ResourceRecordSetsChangedWaiterOptions) {
		o.MinDelay, o.MaxDelay = r.p.poll, r.p.maxDelay()
	})
	if err := w.Wait(ctx, &route53.GetChangeInput{Id: aws.String(changeID)}, r.p.waitMax(ctx)); err != nil {
		return mapErr(err, "wait until DNS change %s is INSYNC", changeID)
	}
	return nil
}

// unaliasNLB turns every A record of the hosted zone that aliases the NLB
// back into an A record to the Elastic IP and waits until Route53 is in
// sync: with the DNS endpoint, demotion must move the name off the NLB
// before the NLB goes. The records are found by their alias target (the
// provider does not know the name the workflows gave).
func (p *Provider) unaliasNLB(ctx context.Context, nlbDNSName string) error {
	zone := p.opts[OptHostedZoneID]
	if zone == "" || nlbDNSName == "" {
		return nil
	}
	eip, err := p.eipAddress(ctx)
	if err != nil {
		return err
	}
	r := &route53Records{p: p, zone: zone}
	pg := route53.NewListResourceRecordSetsPaginator(p.r53, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone)})
	var ids []string
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return mapErr(err, "list records of hosted zone %s", zone)
		}
		for _, rs := range page.ResourceRecordSets {
			if rs.Type != r53types.RRTypeA || rs.AliasTarget == nil || !strings.EqualFold(fqdn(aws.ToString(rs.AliasTarget.DNSName)), fqdn(nlbDNSName)) {
				continue
			}
			id, err := r.change(ctx, r53types.ChangeActionUpsert, r53types.ResourceRecordSet{Name: rs.Name, Type: r53types.RRTypeA, TTL: aws.Int64(recordTTL),
				ResourceRecords: []r53types.ResourceRecord{{Value: aws.String(eip)}}})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if err := r.Wait(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
