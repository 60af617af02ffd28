package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// Every global flag works after the command name (and after a subcommand's
// parent), with the same validation and precedence as before it.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "cfg.yaml", "cluster: fromfile\n")
	typo := writeTestFile(t, dir, "typo.yaml", "clustr: x\n")
	runCLICases(t, []string{"HOME=" + dir}, true, []cliCase{
		{"output after status is validated", nil, []string{"status", "--output", "yaml"}, 2, "--output", ""},
		{"log-level after status is validated", nil, []string{"status", "--log-level", "loud"}, 2, "--log-level", ""},
		{"log-format after status is validated", nil, []string{"status", "--log-format", "xml"}, 2, "--log-format", ""},
		{"provider after status", nil, []string{"status", "--provider", "azure"}, 2, "--provider", ""},
		{"cluster after status names the cluster", nil, []string{"--state-dir", dir, "status", "--cluster", "after"}, 1, `"after"`, ""},
		{"cluster after the subcommand's parent", nil, []string{"--state-dir", dir, "local", "--cluster", "mid", "down", "--dry-run"}, 0, "", "mid"},
		{"cluster after the subcommand", nil, []string{"--state-dir", dir, "local", "down", "--cluster", "sub", "--dry-run"}, 0, "", "sub"},
		{"the flag after the command beats the one before", nil, []string{"--cluster", "before", "--state-dir", dir, "status", "--cluster", "after"}, 1, `"after"`, ""},
		{"the flag after the command beats the environment", []string{"HAMASTER_CLUSTER=fromenv"}, []string{"--state-dir", dir, "status", "--cluster", "after"}, 1, `"after"`, ""},
		{"config after the command fills the cluster", nil, []string{"--state-dir", dir, "status", "--config", cfg}, 1, `"fromfile"`, ""},
		{"config after the command loses to the environment", []string{"HAMASTER_CLUSTER=fromenv"}, []string{"--state-dir", dir, "status", "--config", cfg}, 1, `"fromenv"`, ""},
		{"config after the command loses to a flag before it", nil, []string{"--cluster", "flag", "--state-dir", dir, "status", "--config", cfg}, 1, `"flag"`, ""},
		{"config keys are checked after the command too", nil, []string{"status", "--config", typo}, 2, "clustr", ""},
		{"dry-run after a command without its own", nil, []string{"--state-dir", dir, "local", "down", "--dry-run"}, 0, "", "Dry run"},
		{"state-dir after the command", nil, []string{"status", "--state-dir", filepath.Join(dir, "elsewhere")}, 1, "elsewhere", ""},
		{"output json after version", nil, []string{"version", "--output", "json"}, 0, "", `"go":`},
		{"output json after history", nil, []string{"--state-dir", dir, "history", "--output", "json"}, 0, "", `"runs": []`},
		{"output json after etcd members is validated", nil, []string{"etcd", "members", "--output", "yaml", "--endpoints", "http://127.0.0.1:1"}, 2, "--output", ""},
	})
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, errs := hm(t, nil, "version", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if v.Version == "" || v.Commit == "" || !strings.HasPrefix(v.Go, "go1.") || v.Platform == "" {
		t.Fatalf("incomplete: %+v", v)
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"--version", "status"}} {
		code, text, _ := hm(t, nil, args...)
		if code != 0 || !strings.HasPrefix(text, "hamaster "+v.Version+" (commit "+v.Commit) || strings.Count(text, "\n") != 1 {
			t.Fatalf("%v: exit %d %q", args, code, text)
		}
	}
	// --output json before the flag too.
	if code, out, _ := hm(t, nil, "--output", "json", "--version"); code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("--output json --version: exit %d %q", code, out)
	}
}

func TestCompletionAndMan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shell, want string
	}{
		{"bash", "complete -o bashdefault -o default -o nospace -F _hamaster_bash_autocomplete hamaster"},
		{"zsh", "compdef _hamaster_zsh_autocomplete hamaster"},
		{"fish", "complete -c hamaster"},
	} {
		code, out, errs := hm(t, nil, "completion", c.shell)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("completion %s: exit %d %s\n%s", c.shell, code, errs, out)
		}
	}
	if code, _, errs := hm(t, nil, "completion", "tcsh"); code != 2 || !strings.Contains(errs, "bash, zsh, fish") {
		t.Errorf("completion tcsh: exit %d %s", code, errs)
	}
	code, out, _ := hm(t, nil, "man")
	if code != 0 || !strings.Contains(out, ".TH hamaster 1") || !strings.Contains(out, "add-replica") || !strings.Contains(out, "--log-format") {
		t.Errorf("man: exit %d\n%.300s", code, out)
	}
}

func TestVoterWarning(t *testing.T) {
	t.Parallel()
	cases := []struct {
		voters int
		want   string // "" = no warning
	}{
		{0, ""}, {1, ""}, {3, ""}, {5, ""},
		{2, "2 etcd voters: quorum is 2, so it tolerates 0 failed replica(s), the same as 1 voters; add or remove one replica for an odd count (3 voters tolerate 1)"},
		{4, "4 etcd voters: quorum is 3, so it tolerates 1 failed replica(s), the same as 3 voters; add or remove one replica for an odd count (5 voters tolerate 2)"},
	}
	for _, c := range cases {
		got := voterWarning(c.voters)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%d voters: %q, want %q", c.voters, got, c.want)
		}
	}
}

// The completion scripts ask the binary for candidates (urfave/cli reads
// os.Args for them, so this runs the built binary).
func TestCompletionCandidatesFromTheBinary(t *testing.T) {
	t.Parallel()
	bin := localtest.HamasterBinary(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--generate-bash-completion"}, []string{"add-replica", "history", "completion", "version"}},
		{[]string{"remove-replica", "--dr", "--generate-bash-completion"}, []string{"--drain-grace", "--dry-run"}},
		{[]string{"local", "--generate-bash-completion"}, []string{"up", "down"}},
	}
	for _, c := range cases {
		out, err := exec.Command(bin, c.args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		for _, w := range c.want {
			if !slices.Contains(strings.Fields(string(out)), w) {
				t.Errorf("%v: no candidate %q in\n%s", c.args, w, out)
			}
		}
	}
}

// A command's own flags come from the --config file wherever --config is
// given (before the command, after it, or by $HAMASTER_CONFIG).
func TestConfigFillsCommandFlagsWhereverGiven(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeTestFile(t, dir, "cfg.yaml", "drain-grace: -3s\n")
	for _, c := range []struct {
		environ []string
		args    []string
	}{
		{nil, []string{"--config", cfg, "--state-dir", dir, "remove-replica", "--name", "x"}},
		{nil, []string{"--state-dir", dir, "remove-replica", "--config", cfg, "--name", "x"}},
		{[]string{"HAMASTER_CONFIG=" + cfg}, []string{"--state-dir", dir, "remove-replica", "--name", "x"}},
	} {
		// The negative grace from the file is refused, naming the flag.
		code, _, errs := hm(t, append([]string{"HOME=" + dir}, c.environ...), c.args...)
		if code != 2 || !strings.Contains(errs, "--drain-grace") {
			t.Errorf("%v %v: exit %d %s", c.environ, c.args, code, errs)
		}
	}
}

// The per-provider format flags are gone (--flavor says what the
// masters are): a config file naming one is refused before anything
// changes, with what replaced it; the flag itself is unknown.
func TestRemovedFormatFlagsSayWhatReplacedThem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--config", writeTestFile(t, dir, "gce.yaml", "gce-master-format: kubeadm\n"), "status"}, []string{"gce-master-format was removed", "set flavor"}},
		{[]string{"--config", writeTestFile(t, dir, "aws.yaml", "aws-master-format: kube-up\n"), "status"}, []string{"aws-master-format was removed", "kubeup for kube-up"}},
		{[]string{"--gce-master-format", "kubeadm", "status"}, []string{"gce-master-format"}},
	} {
		code, _, errs := hm(t, []string{"HOME=" + dir}, append([]string{"--state-dir", dir}, c.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage); stderr %s", c.args, code, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr %q does not say %q", c.args, errs, w)
			}
		}
	}
}

// In --output json, stdout is one JSON document even for the local
// provider's commands.
func TestLocalDryRunsAreJSONInJSONMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"local", "up", "--dry-run"}, {"local", "down", "--dry-run"}} {
		code, out, errs := hm(t, []string{"HOME=" + dir}, append([]string{"--state-dir", dir, "--output", "json"}, args...)...)
		var doc struct {
			Kind   string `json:"kind"`
			DryRun bool   `json:"dry_run"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.Kind != "plan" || !doc.DryRun {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}
