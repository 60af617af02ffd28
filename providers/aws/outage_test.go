package aws_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/aws/awstest"
)

// outageProbe GETs /readyz on addr every tick and keeps the longest run of
// failures after the first success.
type outageProbe struct {
	mu              sync.Mutex
	longest         time.Duration
	failSince       time.Time
	okSeen          bool
	probes, failure int
}

func (o *outageProbe) run(ctx context.Context, c *http.Client, url string, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 4*tick)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		now := time.Now()
		o.mu.Lock()
		o.probes++
		switch {
		case ok && !o.failSince.IsZero():
			o.longest = max(o.longest, now.Sub(o.failSince))
			o.failSince = time.Time{}
		case !ok && o.okSeen && o.failSince.IsZero() && ctx.Err() == nil:
			o.failSince = now
		}
		if !ok {
			o.failure++
		}
		o.okSeen = o.okSeen || ok
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// TestFirstAddOutage measures what the Elastic IP handover costs clients
// of the cluster's address on the first add: the Elastic IP leaves master
// 0, then the NLB provisions and its health checks pass twice at their
// interval, all while the address answers nowhere. It runs under AWS's
// documented NLB timings scaled by awstest.DefaultScale and prints the
// outage scaled and unscaled.
func TestFirstAddOutage(t *testing.T) {
	t.Parallel()
	e := &env{t: t, c: awstest.Up(t, "outage", awstest.Options{})}
	c := e.c
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "https://" + net.JoinHostPort(c.StaticIP, strconv.Itoa(providers.APIServerPort)) + "/readyz"
	var o outageProbe
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); o.run(pctx, client, url, 10*time.Millisecond) }()
	start := time.Now()
	if err := e.add(ctx, "outage-master-a01", nil); err != nil {
		stop()
		<-done
		t.Fatalf("first add: %v", err)
	}
	took := time.Since(start)
	// The add returns once the LB serves; let the probe see it.
	settle, cancelSettle := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSettle()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for settled := false; !settled; {
		select {
		case <-settle.Done():
			settled = true
		case <-tick.C:
			o.mu.Lock()
			settled = o.okSeen && o.failSince.IsZero() && o.probes > 0
			o.mu.Unlock()
		}
	}
	stop()
	<-done
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.okSeen {
		t.Fatalf("the static IP never answered /readyz (%d probes)", o.probes)
	}
	if !o.failSince.IsZero() {
		t.Fatalf("the static IP still fails %s after the first add returned", time.Since(o.failSince))
	}
	scale := awstest.DefaultScale
	const interval, threshold = 10 * time.Second, 2 // the provider's target group
	floor := time.Duration(float64(awstest.AWSProvisioning) * scale)
	t.Logf("first add (Elastic IP handover): took %s; the Elastic IP answered nowhere for %.2f s at scale %g = %.0f s unscaled (AWS: NLB provisioning %s + %d health checks at %s; %d of %d probes failed)",
		took.Round(time.Millisecond), o.longest.Seconds(), scale, o.longest.Seconds()/scale, awstest.AWSProvisioning, threshold, interval, o.failure, o.probes)
	if o.longest < floor {
		t.Errorf("outage %s is shorter than the scaled NLB provisioning %s: the proxy's NLB timing did not play", o.longest, floor)
	}
}
