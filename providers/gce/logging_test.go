package gce_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/providertest"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// The logger of providers.Settings reaches the Compute client: each
// request is logged at debug, and nothing at a higher level.
func TestSettingsLoggerLogsSDKRequestsAtDebug(t *testing.T) {
	t.Parallel()
	f := gcetest.Fake(t, gcefake.Options{Subnet: localtest.AllocSubnet(t)})
	providertest.SDKCallsLoggedAtDebug(t, func(ctx context.Context, logger *slog.Logger) (providers.Provider, error) {
		return gce.New(ctx, providers.Settings{Cluster: "logs", StateDir: t.TempDir(), Logger: logger,
			Options: map[string]string{gce.OptProject: f.Project(), gce.OptZones: gcetest.ZoneA, gce.OptEndpoint: f.URL, remote.OptUser: "unused"}})
	}, func(_ *testing.T, out string, _ error) bool {
		return strings.Contains(out, "/instances") // what List finds does not matter here
	})
}
