package ctxutil

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	if !Sleep(t.Context(), time.Millisecond) {
		t.Error("Sleep(live context) = false, want true")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(cancelled context) = true, want false")
	}
	if waited := time.Since(start); waited > time.Minute {
		t.Errorf("Sleep(cancelled context) waited %v", waited)
	}
}
