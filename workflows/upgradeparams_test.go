package workflows

import (
	"testing"

	"github.com/hamaster/hamaster/providers"
)

// TestUpgradeParamsWithoutVersion: a flags-only upgrade keeps each
// replica's version, including none (a kube-up master on its devel
// upload, whose template names no version).
func TestUpgradeParamsWithoutVersion(t *testing.T) {
	t.Parallel()
	devel := providers.Replica{Name: "m", Template: providers.Template{ExtraArgs: []string{"--v=2"}}}
	release := providers.Replica{Name: "r", Template: providers.Template{Version: "v1.31.0", ExtraArgs: []string{"--v=2"}}}
	cases := []struct {
		name     string
		p        UpgradeParams
		rep      providers.Replica
		atTarget bool
		version  string // of the target template
	}{
		{"flags only, devel", UpgradeParams{ExtraArgs: []string{"--v=4"}, ExtraArgsSet: true}, devel, false, ""},
		{"flags only, release", UpgradeParams{ExtraArgs: []string{"--v=4"}, ExtraArgsSet: true}, release, false, "v1.31.0"},
		{"flags only, already there", UpgradeParams{ExtraArgs: []string{"--v=2"}, ExtraArgsSet: true}, release, true, "v1.31.0"},
		{"version, devel", UpgradeParams{Version: "v1.31.0"}, devel, false, "v1.31.0"},
		{"version, already there", UpgradeParams{Version: "v1.31.0"}, release, true, "v1.31.0"},
	}
	for _, tc := range cases {
		if got := tc.p.atTarget(tc.rep); got != tc.atTarget {
			t.Errorf("%s: atTarget = %v, want %v", tc.name, got, tc.atTarget)
		}
		if got := tc.p.target(tc.rep.Template).Version; got != tc.version {
			t.Errorf("%s: target version %q, want %q", tc.name, got, tc.version)
		}
	}
}
