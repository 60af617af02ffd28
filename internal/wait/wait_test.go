package wait

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	t.Parallel()
	calls := 0
	if err := Until(context.Background(), time.Millisecond, "three calls", func() (bool, error) {
		calls++
		return calls == 3, nil
	}); err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls", err, calls)
	}
	boom := errors.New("boom")
	if err := Until(context.Background(), time.Millisecond, "x", func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("check error not returned: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Until(ctx, time.Hour, "never", func() (bool, error) { return false, nil })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "wait for never") {
		t.Fatalf("cancelled wait = %v", err)
	}
}
