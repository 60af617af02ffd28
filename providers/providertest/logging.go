package providertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/providers"
)

// SDKCallsLoggedAtDebug checks that the logger of providers.Settings
// reaches a provider's SDK: open makes the provider with logger, at
// debug and then at warn; after a List of its instances logged says
// whether what was logged shows the call (listErr: the List's error). It
// must at debug, and nothing may at a higher level.
func SDKCallsLoggedAtDebug(t *testing.T, open func(ctx context.Context, logger *slog.Logger) (providers.Provider, error), logged func(t *testing.T, out string, listErr error) bool) {
	t.Helper()
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, true}, {slog.LevelWarn, false}} {
		var buf syncbuf.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := open(ctx, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, err = p.Instances().List(ctx)
		p.Close()
		cancel()
		if got := logged(t, buf.String(), err); got != c.want {
			t.Errorf("level %s: call logged %v, want %v:\n%s", c.level, got, c.want, buf.String())
		}
	}
}
