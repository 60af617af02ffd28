package aws_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
)

// syncBuffer captures output written by one goroutine and read by another.
type syncBuffer = syncbuf.Buffer

// The logger of providers.Settings gets one debug line per SDK call
// (service, operation, duration, error), and nothing at a higher level.
func TestSettingsLoggerLogsSDKCallsAtDebug(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<Response><Errors><Error><Code>InternalError</Code></Error></Errors></Response>", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, true}, {slog.LevelWarn, false}} {
		var buf syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := awsp.New(ctx, providers.Settings{Cluster: "logs", StateDir: t.TempDir(),
			Logger:  slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})),
			Options: map[string]string{awsp.OptRegion: "us-east-1", awsp.OptEndpoint: srv.URL, awsp.OptMaxAttempts: "1", awsp.OptMasterFormat: awsp.MasterFormatHamaster}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, err = p.Instances().List(ctx)
		p.Close()
		cancel()
		if err == nil {
			t.Fatal("List against a failing endpoint succeeded")
		}
		got := strings.Contains(buf.String(), "aws request") && strings.Contains(buf.String(), "service=EC2") && strings.Contains(buf.String(), "operation=DescribeInstances") && strings.Contains(buf.String(), "error=")
		if got != c.want {
			t.Errorf("level %s: call logged %v, want %v:\n%s", c.level, got, c.want, buf.String())
		}
	}
}
