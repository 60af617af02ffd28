package gce_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// syncBuffer captures output written by one goroutine and read by another.
type syncBuffer = syncbuf.Buffer

// The logger of providers.Settings reaches the Compute client: each
// request is logged at debug, and nothing at a higher level.
func TestSettingsLoggerLogsSDKRequestsAtDebug(t *testing.T) {
	t.Parallel()
	f, err := gcefake.New(gcefake.Options{Subnet: localtest.AllocSubnet(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, true}, {slog.LevelWarn, false}} {
		var buf syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := gce.New(ctx, providers.Settings{Cluster: "logs", StateDir: t.TempDir(),
			Logger:  slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: c.level})),
			Options: map[string]string{gce.OptProject: f.Project(), gce.OptZones: gcetest.ZoneA, gce.OptEndpoint: f.URL, gce.OptSSHUser: "unused"}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, _ = p.Instances().List(ctx) // what it finds does not matter here
		p.Close()
		cancel()
		if got := strings.Contains(buf.String(), "/instances"); got != c.want {
			t.Errorf("level %s: request logged %v, want %v:\n%s", c.level, got, c.want, buf.String())
		}
	}
}
