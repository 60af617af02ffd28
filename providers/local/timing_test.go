package local

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

func TestLBHealthOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    map[string]string
		want    [4]any // interval, timeout, healthy, unhealthy
		wantErr bool
	}{
		{name: "unset keeps the instant timing", want: [4]any{100 * time.Millisecond, time.Second, 1, 2}},
		{name: "gce", opts: map[string]string{OptLBHealthInterval: "5s", OptLBHealthTimeout: "5s", OptLBHealthyThreshold: "2", OptLBUnhealthyThreshold: "2"}, want: [4]any{5 * time.Second, 5 * time.Second, 2, 2}},
		{name: "partial", opts: map[string]string{OptLBUnhealthyThreshold: "3"}, want: [4]any{100 * time.Millisecond, time.Second, 1, 3}},
		{name: "bad duration", opts: map[string]string{OptLBHealthInterval: "soon"}, wantErr: true},
		{name: "zero threshold", opts: map[string]string{OptLBHealthyThreshold: "0"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Provider{opts: tt.opts, l: layout{dir: t.TempDir()}}
			h, err := p.lbHealth()
			if tt.wantErr {
				if !errors.Is(err, errkind.InvalidArgument) {
					t.Fatalf("lbHealth() error = %v, want InvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := [4]any{h.Interval.Duration, h.Timeout.Duration, h.HealthyThreshold, h.UnhealthyThreshold}
			if got != tt.want {
				t.Errorf("lbHealth() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBootDelay(t *testing.T) {
	t.Parallel()
	// Unset: no wait at all.
	p := &Provider{log: slog.New(slog.DiscardHandler)}
	if err := p.waitBoot(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	// Set: the wait honours ctx (an hour never elapses here).
	p.opts = map[string]string{OptBootDelay: "1h"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.waitBoot(ctx, "r"); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitBoot() = %v, want context.Canceled", err)
	}
	p.opts = map[string]string{OptBootDelay: "-1s"}
	if err := p.waitBoot(context.Background(), "r"); !errors.Is(err, errkind.InvalidArgument) {
		t.Fatalf("waitBoot() = %v, want InvalidArgument", err)
	}
}

// A bad timing option is refused when the provider opens, naming the
// option, before any command changes anything.
func TestTimingOptionsCheckedAtOpen(t *testing.T) {
	t.Parallel()
	for _, k := range []string{OptBootDelay, OptLBProvisionDelay, OptLBHealthInterval, OptLBHealthyThreshold, OptLBNoDialRetry} {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			_, err := open(providers.Settings{Cluster: "c", StateDir: t.TempDir(), Options: map[string]string{k: "soon"}})
			if !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), k) {
				t.Fatalf("open with %s=soon: %v; want InvalidArgument naming %s", k, err, k)
			}
		})
	}
	if _, err := open(providers.Settings{Cluster: "c", StateDir: t.TempDir(), Options: map[string]string{OptLBProvisionDelay: "3m"}}); err != nil {
		t.Fatal(err)
	}
}
