//go:build metallab

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/local/localtest"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/workflows"
	"github.com/hamaster/hamaster/workflows/workflowstest"
)

// labCLI is the real hamaster CLI pointed at a metal lab as an operator
// points it (the lab's hamaster.env, a state directory of its own, the
// kubeadm flavor), and a shell on the lab's hosts.
type labCLI struct {
	ctx context.Context
	t   *testing.T
	lab *metallab.Lab
	env []string
	bin string
}

func newLabCLI(ctx context.Context, t *testing.T, lab *metallab.Lab) *labCLI {
	env := append(os.Environ(), labEnv(t, lab.EnvFile)...)
	env = append(env, "HAMASTER_STATE_DIR="+t.TempDir(), "HAMASTER_CLUSTER=lab", "HAMASTER_FLAVOR=kubeadm")
	return &labCLI{ctx: ctx, t: t, lab: lab, env: env, bin: localtest.HamasterBinary(t)}
}

// sh runs cmd on h over SSH and returns its trimmed stdout.
func (c *labCLI) sh(h *metallab.Host, cmd string) (string, error) {
	cl, err := c.lab.Dial(c.ctx, h)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	out, stderr, err := cl.Run(c.ctx, cmd)
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", cmd, h.Name, err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// must is sh, failing the test on an error.
func (c *labCLI) must(h *metallab.Host, cmd string) string {
	c.t.Helper()
	out, err := c.sh(h, cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// command is hamaster with args, extra environment last.
func (c *labCLI) command(extra []string, args ...string) (*exec.Cmd, *strings.Builder) {
	cmd := exec.CommandContext(c.ctx, c.bin, args...)
	cmd.Env = append(slices.Clone(c.env), extra...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// hm runs hamaster with args and returns its output; it must succeed.
func (c *labCLI) hm(args ...string) string {
	c.t.Helper()
	cmd, out := c.command(nil, args...)
	start := time.Now()
	err := cmd.Run()
	c.t.Logf("hamaster %s: %v (%s, from %s)", strings.Join(args, " "), err, time.Since(start).Round(100*time.Millisecond), start.Format("15:04:05.000"))
	if err != nil {
		c.t.Fatalf("hamaster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out.String()
}

// status decodes `hamaster --output json status` into v, whatever its
// exit status (3 while something is not healthy: the answer is what
// counts), which it logs.
func (c *labCLI) status(v any) {
	c.t.Helper()
	cmd, errs := c.command(nil, "--output", "json", "status", "--timeout", "90s")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	c.t.Logf("hamaster status: %v", cmd.Run())
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		c.t.Fatalf("hamaster status: %v\n%s\n%s", err, stdout.Bytes(), errs)
	}
}

// tlsFor returns a TLS configuration that trusts the cluster's CA (h's
// /etc/kubernetes/pki/ca.crt), each call a new one: the old address is
// verified for its IP, the VIP for the VIP, each name in the apiserver's
// certificate.
func (c *labCLI) tlsFor(h *metallab.Host) func() *tls.Config {
	c.t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(c.must(h, "cat /etc/kubernetes/pki/ca.crt"))) {
		c.t.Fatalf("%s's ca.crt holds no certificate", h.Name)
	}
	return func() *tls.Config { return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} }
}

// historyAtLeast checks that `hamaster history` records at least the
// given number of runs of each "workflow result" (a killed run records
// nothing; its resumed run does).
func (c *labCLI) historyAtLeast(want map[string]int) {
	c.t.Helper()
	var hist struct {
		Runs []struct {
			Workflow string `json:"workflow"`
			Result   string `json:"result"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(c.hm("--output", "json", "history")), &hist); err != nil {
		c.t.Fatal(err)
	}
	runs := map[string]int{}
	for _, r := range hist.Runs {
		runs[r.Workflow+" "+r.Result]++
	}
	for k, min := range want {
		if runs[k] < min {
			c.t.Errorf("history: %d runs %s, want at least %d (all: %v)", runs[k], k, min, runs)
		}
	}
	c.t.Logf("history: %v", runs)
}

// crashAfter runs hamaster with args until it kills itself right after
// step is journaled (the fault hook of the test build).
func (c *labCLI) crashAfter(step string, args ...string) {
	c.t.Helper()
	cmd, out := c.command([]string{"HAMASTER_FAULT_CRASH_AFTER_STEP=" + step}, args...)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		c.t.Fatalf("hamaster %s with a crash after %s: %v, want killed\n%s", strings.Join(args, " "), step, err, out)
	}
	c.t.Logf("hamaster %s: killed after %s at %s", strings.Join(args, " "), step, time.Now().Format("15:04:05.000"))
}

// jsonOut runs hamaster with args and stdin and decodes its stdout alone
// (warnings go to stderr) into v.
func (c *labCLI) jsonOut(v any, stdin string, args ...string) {
	c.t.Helper()
	cmd, errs := c.command(nil, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("hamaster %s: %v\n%s", strings.Join(args, " "), err, errs)
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		c.t.Fatalf("hamaster %s: %v\n%s", strings.Join(args, " "), err, stdout.Bytes())
	}
}

// chainOpts says which steps of a crash chain are not crashed after in
// every run.
type chainOpts struct {
	// skip: steps whose names start with one of these are run through,
	// not crashed after (steps of the same kind as earlier ones).
	skip []string
	// rotate: of the steps whose names start with one of these, one shard
	// is crashed after per run, chosen from the commit
	// (workflowstest.SelectTagged; HAMASTER_CRASH_SEED=all crashes after
	// all of them), so that successive runs cover them all.
	rotate []string
}

// crashChain is the crash-resume matrix over every step of one run:
// killed right after its first step, resumed (resumeArgs: the journal has
// the rest) and killed after the next, and so on; the last resume
// finishes. Each step so runs in a process of its own that dies once the
// step is journaled, and the next process picks up from the journal, as
// an operator's re-run does after any crash. o leaves steps out (skip) or
// to a shard of runs (rotate).
func (c *labCLI) crashChain(args, resumeArgs []string, o chainOpts) {
	c.t.Helper()
	var plan workflows.PlanDoc
	c.jsonOut(&plan, "", append(slices.Clone(args), "--dry-run", "--output", "json")...)
	if len(plan.Steps) < 2 {
		c.t.Fatalf("plan of %v: %d steps", args, len(plan.Steps))
	}
	prefixed := func(name string, prefixes []string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	var steps, always []string
	for _, st := range plan.Steps[:len(plan.Steps)-1] {
		if prefixed(st.Name, o.skip) {
			continue
		}
		steps = append(steps, st.Name)
		if !prefixed(st.Name, o.rotate) {
			always = append(always, st.Name)
		}
	}
	if len(o.rotate) > 0 {
		steps = workflowstest.SelectTagged(c.t, "metallab", steps, always)
	}
	start := time.Now()
	run := args
	for _, st := range steps {
		c.crashAfter(st, run...)
		run = resumeArgs
	}
	c.hm(run...)
	c.t.Logf("hamaster %s: killed after %d of its %d steps but the last (%+v), resumed each time: %s", strings.Join(args, " "), len(steps), len(plan.Steps)-1, o, time.Since(start).Round(100*time.Millisecond))
}
