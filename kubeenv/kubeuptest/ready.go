package kubeuptest

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// WaitReady polls url (a kube-up master's https://IP:443/readyz) with
// client until it answers 200, or until timeout; failed, when set, is
// asked after each miss, and a non-empty answer (why the master's boot
// failed) ends the wait at once.
func WaitReady(ctx context.Context, client *http.Client, url string, timeout time.Duration, failed func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		if failed != nil {
			if why := failed(); why != "" {
				return fmt.Errorf("%s: the master's boot failed:\n%s", url, why)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", url, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
