// Package ctxutil holds context helpers the packages share.
package ctxutil

import (
	"context"
	"errors"
	"time"
)

// WithoutDeadline is ctx without its deadline, bounded by d instead: it
// ends when ctx is cancelled, but not when ctx's deadline passes. For
// set-up an attempt needs but does not own (reading a CA or a client
// certificate over SSH, sessions that take a second or more each to start
// on real hosts), so that a short per-attempt deadline does not starve it
// attempt after attempt.
func WithoutDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return c, func() { stop(); cancel() }
}
