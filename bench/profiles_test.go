package bench

import (
	"testing"
	"time"
)

// These check the benchmark's bookkeeping only; the benchmark itself runs
// with -bench and nothing here depends on its timings.

func TestProfileScaledKeepsEveryState(t *testing.T) {
	t.Parallel()
	for name, p := range profiles {
		s := p.Scaled(0.05)
		if s.HealthyThreshold != p.HealthyThreshold || s.UnhealthyThreshold != p.UnhealthyThreshold {
			t.Errorf("%s: thresholds changed by scaling: %+v → %+v", name, p, s)
		}
		if want := time.Duration(float64(p.HealthInterval) * 0.05); s.HealthInterval != want {
			t.Errorf("%s: interval %v, want %v", name, s.HealthInterval, want)
		}
		if (p.BootDelay > 0) != (s.BootDelay > 0) {
			t.Errorf("%s: boot delay %v dropped to %v", name, p.BootDelay, s.BootDelay)
		}
		if (p.LBProvisioning > 0) != (s.LBProvisioning > 0) {
			t.Errorf("%s: LB provisioning %v dropped to %v", name, p.LBProvisioning, s.LBProvisioning)
		}
	}
}

func TestLongestFailRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		samples []Sample
		want    float64
	}{
		{name: "none"},
		{name: "all ok", samples: []Sample{{AtMS: 0, OK: true}, {AtMS: 10, OK: true}}},
		{name: "one failure", samples: []Sample{{AtMS: 0, OK: true}, {AtMS: 10, LatencyMS: 5}, {AtMS: 20, OK: true}}, want: 5},
		{name: "two runs, longest wins, out of order", samples: []Sample{
			{AtMS: 100, LatencyMS: 1}, {AtMS: 0, LatencyMS: 2}, {AtMS: 5, OK: true},
			{AtMS: 50, LatencyMS: 1}, {AtMS: 70, LatencyMS: 40}, {AtMS: 120, OK: true},
		}, want: 60},
	}
	for _, tt := range tests {
		if got := longestFailRun(tt.samples); got != tt.want {
			t.Errorf("%s: longestFailRun = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// benchProfile is profileFromEnv for a benchmark: a bad setting fails it.
func benchProfile(b *testing.B) (Profile, float64) {
	b.Helper()
	prof, scale, err := profileFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return prof, scale
}
