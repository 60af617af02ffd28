// Package dns is the records seam: a managed-DNS driver (Cloud DNS, Route53)
// or the static driver, which prints what an operator must set by hand.
//
// Contract: Upsert and Delete are idempotent and return a change ID that
// Wait blocks on until the change is applied (in sync); Delete of an absent
// record is success; Get of an absent record returns errkind.NotFound.
package dns

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/hamaster/hamaster/errkind"
)

// Records manages A records.
type Records interface {
	// Kind names the driver ("static", "clouddns", "route53").
	Kind() string
	// Get returns the addresses of name's A record.
	Get(ctx context.Context, name string) ([]string, error)
	// Upsert sets name's A record to exactly ips.
	Upsert(ctx context.Context, name string, ips []string) (changeID string, err error)
	// Delete removes name's A record.
	Delete(ctx context.Context, name string) (changeID string, err error)
	// Wait waits until the change is applied.
	Wait(ctx context.Context, changeID string) error
}

// Static is the unmanaged-DNS driver: it manages nothing and tells the
// operator, on w, which A records to set.
type Static struct {
	W io.Writer
	// records remembers what was printed, so Get answers consistently
	// within one run.
	records map[string][]string
}

// NewStatic returns the static driver writing instructions to w.
func NewStatic(w io.Writer) *Static { return &Static{W: w, records: map[string][]string{}} }

// Kind implements Records.
func (s *Static) Kind() string { return "static" }

// Get implements Records.
func (s *Static) Get(_ context.Context, name string) ([]string, error) {
	ips, ok := s.records[name]
	if !ok {
		return nil, errkind.Errorf(errkind.NotFound, "dns record %s: not managed by the static driver", name)
	}
	return ips, nil
}

// Upsert implements Records by printing the record to set.
func (s *Static) Upsert(_ context.Context, name string, ips []string) (string, error) {
	sorted := append([]string(nil), ips...)
	sort.Strings(sorted)
	s.records[name] = sorted
	fmt.Fprintf(s.W, "DNS (unmanaged): set %s. A %s (TTL 60)\n", strings.TrimSuffix(name, "."), strings.Join(sorted, " "))
	return "static", nil
}

// Delete implements Records by printing the record to remove.
func (s *Static) Delete(_ context.Context, name string) (string, error) {
	delete(s.records, name)
	fmt.Fprintf(s.W, "DNS (unmanaged): remove the A record %s.\n", strings.TrimSuffix(name, "."))
	return "static", nil
}

// Wait implements Records; there is nothing to wait for.
func (s *Static) Wait(context.Context, string) error { return nil }
