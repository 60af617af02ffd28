package gce

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	dnsv1 "google.golang.org/api/dns/v1"

	"github.com/hamaster/hamaster/errkind"
)

// cloudDNS implements dns.Records with Cloud DNS: every change is one
// changes.create holding the deletion of the current record and the
// addition of the new one, so the record is replaced atomically.
type cloudDNS struct {
	p    *Provider
	zone string
}

// noChange is the change ID returned when nothing had to change.
const noChange = "unchanged"

// Kind implements dns.Records.
func (c *cloudDNS) Kind() string { return "clouddns" }

func fqdn(name string) string {
	if strings.HasSuffix(name, ".") {
		return name
	}
	return name + "."
}

func (c *cloudDNS) get(ctx context.Context, name string) (*dnsv1.ResourceRecordSet, error) {
	var rr *dnsv1.ResourceRecordSet
	err := retry(ctx, "list records "+name, func(ctx context.Context) error {
		resp, err := c.p.dnsSvc.ResourceRecordSets.List(c.p.project, c.zone).Name(fqdn(name)).Type("A").Context(ctx).Do()
		if err != nil {
			return err
		}
		rr = nil
		for _, r := range resp.Rrsets {
			if r.Name == fqdn(name) && r.Type == "A" {
				rr = r
			}
		}
		return nil
	})
	return rr, err
}

// Get implements dns.Records.
func (c *cloudDNS) Get(ctx context.Context, name string) ([]string, error) {
	rr, err := c.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if rr == nil {
		return nil, errkind.Errorf(errkind.NotFound, "dns record %s A not found in managed zone %s", fqdn(name), c.zone)
	}
	return rr.Rrdatas, nil
}

// change applies deletion of the current record plus addition of ips
// (nil: delete only). A conflict (someone changed it in between) re-reads
// and tries again; the change is not retried blindly.
func (c *cloudDNS) change(ctx context.Context, name string, ips []string) (string, error) {
	want := append([]string(nil), ips...)
	sort.Strings(want)
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := c.get(ctx, name)
		if err != nil {
			return "", err
		}
		ch := &dnsv1.Change{}
		if cur != nil {
			have := append([]string(nil), cur.Rrdatas...)
			sort.Strings(have)
			if ips != nil && slices.Equal(have, want) {
				return noChange, nil
			}
			ch.Deletions = []*dnsv1.ResourceRecordSet{cur}
		} else if ips == nil {
			return noChange, nil
		}
		if ips != nil {
			ch.Additions = []*dnsv1.ResourceRecordSet{{Name: fqdn(name), Type: "A", Ttl: 60, Rrdatas: want}}
		}
		var out *dnsv1.Change
		err = mapErr("dns change "+fqdn(name), func() error {
			var err error
			out, err = c.p.dnsSvc.Changes.Create(c.p.project, c.zone, ch).Context(ctx).Do()
			return err
		}())
		switch {
		case err == nil:
			return out.Id, nil
		case errors.Is(err, errkind.AlreadyExists), errors.Is(err, errkind.NotFound), errors.Is(err, errkind.FailedPrecondition), errors.Is(err, errkind.Unavailable):
			// The record moved under us, or the call failed before or
			// after being applied: look again and reconcile.
			continue
		default:
			return "", err
		}
	}
	return "", errkind.Errorf(errkind.Unavailable, "dns change %s: the record kept changing or the API kept failing", fqdn(name))
}

// Upsert implements dns.Records.
func (c *cloudDNS) Upsert(ctx context.Context, name string, ips []string) (string, error) {
	if ips == nil {
		ips = []string{}
	}
	return c.change(ctx, name, ips)
}

// Delete implements dns.Records.
func (c *cloudDNS) Delete(ctx context.Context, name string) (string, error) {
	return c.change(ctx, name, nil)
}

// Wait implements dns.Records: polls changes.get until "done".
func (c *cloudDNS) Wait(ctx context.Context, id string) error {
	if id == noChange || id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.p.opWait)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		var ch *dnsv1.Change
		err := retry(ctx, "get dns change "+id, func(ctx context.Context) error {
			var err error
			ch, err = c.p.dnsSvc.Changes.Get(c.p.project, c.zone, id).Context(ctx).Do()
			return err
		})
		if err != nil {
			return err
		}
		if ch.Status == "done" {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errkind.Errorf(errkind.Unavailable, "dns change %s still %s: %w", id, ch.Status, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}
