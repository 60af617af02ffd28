package workflows

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hamaster/hamaster/providers"
)

// probeEndpoint checks what clients use: GET /readyz on the static IP (the
// LB when there is one), trusting only the cluster CA and, when the
// endpoint is a DNS name, verifying the certificate for that name. It
// probes several times on new connections so every replica behind an LB
// is likely hit at least once; the first failure is returned.
func probeEndpoint(ctx context.Context, d *Deps, rep Report) error {
	if rep.StaticIP == "" {
		return fmt.Errorf("no static IP")
	}
	d.mu.Lock()
	pool, err := d.trustPool(ctx)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	serverName := rep.StaticIP
	if rep.DNSName != "" {
		serverName = rep.DNSName
	}
	c := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
	base := "https://" + net.JoinHostPort(rep.StaticIP, strconv.Itoa(providers.EndpointPortOf(d.Provider)))
	n := max(3, 2*len(rep.Replicas))
	for i := 0; i < n; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("endpoint %s (as %s): %w", base, serverName, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("endpoint %s/readyz: %s: %s", base, resp.Status, trimBody(body))
		}
	}
	return nil
}
