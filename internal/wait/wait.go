// Package wait polls for a condition with a ticker, bounded by a context.
package wait

import (
	"context"
	"fmt"
	"time"
)

// Until calls check every interval (first at once) until it reports true
// or an error, or ctx ends; the error then says what was awaited and wraps
// ctx's error.
func Until(ctx context.Context, interval time.Duration, what string, check func() (bool, error)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := check()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
