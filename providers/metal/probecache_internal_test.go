package metal

import (
	"strings"
	"testing"
)

// A probe is kept only while nothing was done on its host: a change
// during it (between get and keep) or after it drops it; hosts are apart.
func TestProbeCache(t *testing.T) {
	t.Parallel()
	st := hostState{host: Host{Name: "h1"}, reachable: true, claim: "c"}
	tests := []struct {
		ops  string // start: get h1's generation; keep: keep st at it; change:H
		kept bool
	}{
		{"start keep", true},
		{"start change:h1 keep", false},
		{"start keep change:h1", false},
		{"start keep change:h2", true},
		{"change:h1 start keep", true},
	}
	for _, tt := range tests {
		t.Run(tt.ops, func(t *testing.T) {
			t.Parallel()
			var c probeCache
			var gen uint64
			for _, op := range strings.Fields(tt.ops) {
				switch host, _ := strings.CutPrefix(op, "change:"); op {
				case "start":
					_, _, gen = c.get("h1")
				case "keep":
					c.keep("h1", st, gen)
				default:
					c.changed(host)
				}
			}
			got, ok, _ := c.get("h1")
			if ok != tt.kept || (ok && got.claim != "c") {
				t.Errorf("kept = %v (%+v), want %v", ok, got, tt.kept)
			}
		})
	}
}
