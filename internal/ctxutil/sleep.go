package ctxutil

import (
	"context"
	"time"
)

// Sleep waits d, or less when ctx ends first; it reports whether the
// full d passed (false: ctx ended, and the caller should stop).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
