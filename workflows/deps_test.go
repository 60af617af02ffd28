package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/flavors"
)

// slowCAFlavor's masters carry the CA, and reading it takes login each
// time (one SSH session on a host with a slow login).
type slowCAFlavor struct {
	flavors.Flavor // unused methods panic
	login          time.Duration
	pem            []byte
}

func (f *slowCAFlavor) Name() string          { return "slow-ca" }
func (f *slowCAFlavor) APIServerName() string { return "kubernetes" }
func (f *slowCAFlavor) MasterCA(ctx context.Context) ([]byte, error) {
	select {
	case <-time.After(f.login):
		return f.pem, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// The probes' client reads the masters' CA once, however short a probe
// attempt's deadline: the read is set-up, bounded by trustPoolTimeout and
// the caller's cancellation (the README's metal walk failed every verify
// attempt when each SSH login took a second: the CA read never fit the
// attempt's 3 s).
func TestHTTPReadsTheMastersCAPastAnAttemptsDeadline(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("slow", certs.ECDSA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := &slowCAFlavor{login: 300 * time.Millisecond, pem: ca.CertPEM}
	d := &Deps{Master: f}
	attempt, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	c, err := d.HTTP(attempt)
	if err != nil || c == nil {
		t.Fatalf("HTTP under an attempt's 10 ms deadline, the CA read taking 300 ms: %v", err)
	}
	// Cancelled (not a deadline): the read stops.
	d2 := &Deps{Master: &slowCAFlavor{login: time.Hour, pem: ca.CertPEM}}
	cctx, ccancel := context.WithCancel(t.Context())
	ccancel()
	if _, err := d2.HTTP(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("HTTP with a cancelled context: %v, want context.Canceled", err)
	}
}
