package gce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/uuid"

	"github.com/hamaster/hamaster/errkind"
)

// mutate issues one mutating call and waits for its operation. The call
// gets a fresh requestId that every retry repeats, so the API runs it at
// most once. It retries transient failures; the operation's own error is
// mapped like a call's (e.g. a 409 in the operation → AlreadyExists).
func (p *Provider) mutate(ctx context.Context, what string, call func(ctx context.Context, requestID *string) (*compute.Operation, error)) error {
	rid := uuid.NewString()
	var op *compute.Operation
	if err := retry(ctx, what, func(ctx context.Context) error {
		var err error
		op, err = call(ctx, &rid)
		return err
	}); err != nil {
		return err
	}
	return p.waitOp(ctx, what, op.Proto())
}

// waitOp blocks on the operations "wait" method (which the API holds open
// until DONE or ~2 minutes) until the operation is DONE, bounded by the
// provider's operation timeout.
func (p *Provider) waitOp(ctx context.Context, what string, op *computepb.Operation) error {
	ctx, cancel := context.WithTimeout(ctx, p.opWait)
	defer cancel()
	for op.GetStatus() != computepb.Operation_DONE {
		name, zone, region := op.GetName(), lastSeg(op.GetZone()), lastSeg(op.GetRegion())
		err := retry(ctx, what+": wait for operation "+name, func(ctx context.Context) error {
			var next *computepb.Operation
			var err error
			switch {
			case zone != "":
				next, err = p.zoneOps.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: p.project, Zone: zone, Operation: name})
			case region != "":
				next, err = p.regionOps.Wait(ctx, &computepb.WaitRegionOperationRequest{Project: p.project, Region: region, Operation: name})
			default:
				next, err = p.globalOps.Wait(ctx, &computepb.WaitGlobalOperationRequest{Project: p.project, Operation: name})
			}
			if err == nil {
				op = next
			}
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return errkind.Errorf(errkind.Unavailable, "%s: operation %s not done after %v: %w", what, name, p.opWait, err)
			}
			return err
		}
	}
	if e := op.GetError(); e != nil && len(e.GetErrors()) > 0 {
		var msgs []string
		for _, x := range e.GetErrors() {
			msgs = append(msgs, x.GetCode()+": "+x.GetMessage())
		}
		err := fmt.Errorf("%s: operation %s failed: %s", what, op.GetName(), strings.Join(msgs, "; "))
		if k := kindOf(int(op.GetHttpErrorStatusCode()), e.GetErrors()[0].GetCode()); k != nil {
			return errkind.Mark(k, err)
		}
		return err
	}
	return nil
}

// ignore returns nil for errors of the given kinds.
func ignore(err error, kinds ...error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return nil
		}
	}
	return err
}

func lastSeg(u string) string {
	if i := strings.LastIndex(u, "/"); i >= 0 {
		return u[i+1:]
	}
	return u
}

// visible re-reads a resource that an insert just created until the API
// shows it: Compute's reads are eventually consistent, and a new resource
// can be missing from get and list for a while after its operation is
// DONE. Bounded by the operation timeout.
func (p *Provider) visible(ctx context.Context, what string, get func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.opWait)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		err := get(ctx)
		if err == nil || !errors.Is(err, errkind.NotFound) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errkind.Errorf(errkind.Unavailable, "%s: created but still not visible after %v: %w", what, p.opWait, err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}
