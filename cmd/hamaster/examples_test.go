package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

// exitComment is the documented exit code in a command's comment
// ("... exit 1"); no mention means 0.
var exitComment = regexp.MustCompile(`#.*\bexit (\d)\b`)

// shellLines returns the commands of a shell text: continuation lines
// ("\" at the end) joined, blank lines dropped.
func shellLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		if l = cur + l; l != "" {
			out = append(out, l)
		}
		cur = ""
	}
	return out
}

// readmeCommands returns every hamaster command of the sh blocks of
// README.md and then of each docs/*.md page (in name order), in document
// order.
func readmeCommands(t *testing.T) []string {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, p := range append([]string{"../../README.md"}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(b)
		text.WriteString("\n")
	}
	var cmds []string
	for i, block := range strings.Split(text.String(), "```") {
		if i%2 == 0 || !strings.HasPrefix(block, "sh\n") {
			continue
		}
		for _, l := range shellLines(strings.TrimPrefix(block, "sh\n")) {
			if strings.Contains(l, "bin/hamaster ") {
				cmds = append(cmds, l)
			}
		}
	}
	return cmds
}

// helpExamples returns the example commands of every command's --help
// (its Description after "Example"), by command path.
func helpExamples() map[string][]string {
	out := map[string][]string{}
	var visit func(prefix string, cmds []*cli.Command)
	visit = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			path := strings.TrimSpace(prefix + " " + c.Name)
			if _, ex, ok := strings.Cut(c.Description, "\nExample"); ok || strings.HasPrefix(c.Description, "Example") {
				if !ok {
					ex = c.Description
				}
				for _, l := range shellLines(ex) {
					if strings.HasPrefix(l, "hamaster ") || strings.HasPrefix(l, "source <(hamaster ") {
						out[path] = append(out[path], l)
					}
				}
			}
			visit(path, c.Subcommands)
		}
	}
	e := &env{vars: map[string]string{}, stdout: io.Discard, stderr: io.Discard}
	visit("", newApp(e, &globals{}).Commands)
	return out
}

// exampleEnv runs documented command lines verbatim with bash in a
// directory holding bin/hamaster, with hamaster on $PATH, against the
// local cluster "demo" on its own subnet (127.0.65.0/24, derived from the
// name, which the examples spell out).
type exampleEnv struct {
	t   *testing.T
	env []string
	cwd string
}

func newExampleEnv(t *testing.T) *exampleEnv {
	localtest.ClaimSubnet(t, local.DefaultSubnet("demo"), 10*time.Minute)
	cwd := t.TempDir()
	bins := localtest.Binaries(t)
	if err := os.Mkdir(filepath.Join(cwd, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"hamaster", "hamaster-node"} {
		if err := os.Symlink(filepath.Join(bins, b), filepath.Join(cwd, "bin", b)); err != nil {
			t.Fatal(err)
		}
	}
	// Shorter waits than the defaults, through the config file the
	// operator would use; none of these appears in an example.
	cfg := writeTestFile(t, cwd, "hamaster-test.yaml", "drain-grace: 0s\nhealth-timeout: 20s\netcd-heartbeat-ms: 50\netcd-election-ms: 500\n")
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HAMASTER_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			environ = append(environ, kv)
		}
	}
	environ = append(environ, "HOME="+cwd, "PATH="+filepath.Join(cwd, "bin")+":"+os.Getenv("PATH"),
		"HAMASTER_STATE_DIR="+filepath.Join(cwd, "state"), "HAMASTER_CONFIG="+cfg, "HAMASTER_NODE_BINARY="+filepath.Join(bins, "hamaster-node"))
	x := &exampleEnv{t: t, env: environ, cwd: cwd}
	t.Cleanup(func() { x.run("hamaster --cluster demo local down --yes") })
	return x
}

func (x *exampleEnv) run(line string) (int, string, string) {
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir, cmd.Env = x.cwd, x.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		x.t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// check runs line and checks its documented exit code and, with
// --output json, that stdout is JSON only: one document, or one event per
// line for a run with --yes.
func (x *exampleEnv) check(line string) (string, string) {
	x.t.Helper()
	want := 0
	if m := exitComment.FindStringSubmatch(line); m != nil {
		want, _ = strconv.Atoi(m[1])
	}
	start := time.Now()
	code, out, errs := x.run(line)
	x.t.Logf("%4.1fs exit %d: %s", time.Since(start).Seconds(), code, line)
	if code != want {
		x.t.Fatalf("%s\nexit %d, documented %d\nstdout:\n%s\nstderr:\n%s", line, code, want, out, errs)
	}
	if strings.Contains(line, "--output json") && !strings.Contains(line, "| jq") {
		if strings.Contains(line, "--yes") {
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if !json.Valid([]byte(l)) {
					x.t.Fatalf("%s: stdout line is not JSON: %q", line, l)
				}
			}
		} else if !json.Valid([]byte(out)) {
			x.t.Fatalf("%s: stdout is not one JSON document:\n%s", line, out)
		}
	}
	return out, errs
}

// Every command of the README and every --help example runs verbatim on
// a local cluster and exits as documented.
func TestREADMEAndHelpExamplesRunVerbatim(t *testing.T) {
	t.Parallel()
	x := newExampleEnv(t)

	t.Run("README", func(t *testing.T) {
		x.t = t
		cmds := readmeCommands(t)
		if len(cmds) < 10 {
			t.Fatalf("only %d README commands found: %q", len(cmds), cmds)
		}
		// local down last: the commands after it in the text (the
		// Terraform data source) need the cluster.
		var down []string
		for _, l := range cmds {
			if strings.Contains(l, " local down") {
				down = append(down, l)
			}
		}
		for _, l := range append(slices.DeleteFunc(slices.Clone(cmds), func(l string) bool { return slices.Contains(down, l) }), down...) {
			out, errs := x.check(l)
			switch {
			case strings.Contains(l, "add-replica --dry-run --output json"):
				// The plan names the replica the next run adds; the README
				// removes it by that name later.
				if !strings.Contains(out, `"name": "demo-master-8c7"`) || errs != "" {
					t.Fatalf("dry-run plan (stderr %q):\n%s", errs, out)
				}
			case strings.Contains(l, "add-replica --yes") && strings.Contains(l, "warns: 2 voters"):
				if !strings.Contains(errs, "warning: the cluster now has 2 etcd voters") {
					t.Fatalf("no even-voters warning:\n%s", errs)
				}
			case strings.Contains(l, "history"):
				if strings.Count(out, "ok") < 3 || !strings.Contains(out, "rolled-back") && !strings.Contains(out, "failed") {
					t.Fatalf("history lacks the runs:\n%s", out)
				}
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("help", func(t *testing.T) {
		x.t = t
		ex := helpExamples()
		// The order that makes each example meaningful; add-replica's runs
		// twice so that rolling-upgrade has the three replicas it needs.
		order := []string{"local up", "add-replica", "add-replica", "status", "kubeconfig", "snapshots", "rotate-certs", "rolling-upgrade", "remove-replica",
			"recover", "endpoint set", "etcd", "etcd members", "etcd health", "etcd snapshot", "version", "history", "completion", "local down"}
		for path := range ex {
			if !slices.Contains(order, path) {
				t.Errorf("the example of %q is not run by this test: add it to the order", path)
			}
		}
		for _, path := range order {
			if len(ex[path]) == 0 {
				t.Fatalf("%q has no example", path)
			}
			for _, l := range ex[path] {
				x.check(l)
			}
			if path == "local up" {
				// Without --yes and no terminal, JSON mode refuses with
				// nothing on stdout: the text plan goes to stderr.
				code, out, errs := x.run("hamaster --cluster demo --output json add-replica")
				if code != 2 || out != "" || !strings.Contains(errs, "Plan: add-replica") || !strings.Contains(errs, "--yes") {
					t.Fatalf("JSON mode without --yes: exit %d\nstdout: %q\nstderr: %s", code, out, errs)
				}
			}
		}
	})
}
