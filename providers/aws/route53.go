package aws

import (
	"context"
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

// Upsert implements dns.Records (UPSERT, TTL 60).
func (r *route53Records) Upsert(ctx context.Context, name string, ips []string) (string, error) {
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
