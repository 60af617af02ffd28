package aws_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/providertest"
)

// The logger of providers.Settings gets one debug line per SDK call
// (service, operation, duration, error), and nothing at a higher level.
func TestSettingsLoggerLogsSDKCallsAtDebug(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<Response><Errors><Error><Code>InternalError</Code></Error></Errors></Response>", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	providertest.SDKCallsLoggedAtDebug(t, func(ctx context.Context, logger *slog.Logger) (providers.Provider, error) {
		return awsp.New(ctx, providers.Settings{Cluster: "logs", StateDir: t.TempDir(), Logger: logger,
			Options: map[string]string{awsp.OptRegion: "us-east-1", awsp.OptEndpoint: srv.URL, awsp.OptMaxAttempts: "1"}, Flavor: "hamaster"})
	}, func(t *testing.T, out string, listErr error) bool {
		if listErr == nil {
			t.Fatal("List against a failing endpoint succeeded")
		}
		return strings.Contains(out, "aws request") && strings.Contains(out, "service=EC2") && strings.Contains(out, "operation=DescribeInstances") && strings.Contains(out, "error=")
	})
}
