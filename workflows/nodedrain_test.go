package workflows

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// TestNodeDrain: a master's Node is drained unless the run skips drains
// or the master is gone or stopped; a refused drain is the step's error;
// a Node cordoned in the run is uncordoned once (and only then).
func TestNodeDrain(t *testing.T) {
	t.Parallel()
	replicas := []providers.Replica{
		{Name: "a", Address: "198.18.1.1", State: providers.StateRunning},
		{Name: "s", Address: "198.18.1.2", State: providers.StateStopped},
	}
	refused := errkind.Errorf(errkind.FailedPrecondition, "pod default/web-1 is held by PodDisruptionBudget default/web")
	tests := []struct {
		name     string
		replica  string
		skip     bool
		drainErr error
		want     []string // the flavor's calls: the drain, then the uncordon
	}{
		{"drained, then uncordoned", "a", false, nil, []string{"drain a", "uncordon a"}},
		{"skipped", "a", true, nil, nil},
		{"stopped: nothing to move", "s", false, nil, nil},
		{"gone: nothing to move", "x", false, nil, nil},
		{"refused", "a", false, refused, []string{"drain a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &joinFlavor{drainErr: tc.drainErr}
			d := &Deps{Cluster: "c", StateDir: t.TempDir(), Provider: &vipProvider{replicas: replicas}, Master: f}
			params := map[string]string{}
			NodeDrain{Skip: tc.skip}.params(params)
			r := &Run{journal: &Journal{Params: params, Data: map[string]string{}}, store: NewJournalStore(d.StateDir, d.Cluster), sink: &recorder{}, now: time.Now}
			ctx := context.Background()
			err := drainNode(ctx, d, r, tc.replica, time.Minute)
			if !errors.Is(err, tc.drainErr) || (tc.drainErr != nil) != (err != nil) {
				t.Fatalf("drainNode: %v; want %v", err, tc.drainErr)
			}
			if err == nil {
				if err := uncordonNode(ctx, d, r, tc.replica); err != nil {
					t.Fatal(err)
				}
				// Once: a resumed run's second call finds nothing to undo.
				if err := uncordonNode(ctx, d, r, tc.replica); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(f.calls, tc.want) {
				t.Errorf("calls %q; want %q", f.calls, tc.want)
			}
		})
	}
}
