//go:build fidelity || gcekubeadm

package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
)

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// gcefakeProcess is bin/gcefake as an operator runs it.
type gcefakeProcess struct{ *labcmdtest.Process }

// startGCEFake starts bin's gcefake with --state state and args; the
// test's end stops it (SIGTERM) unless the test has.
func startGCEFake(t *testing.T, bin, state string, args ...string) gcefakeProcess {
	t.Helper()
	return gcefakeProcess{labcmdtest.Start(t, filepath.Join(bin, "gcefake"), append([]string{"--state", state}, args...)...)}
}

// awaitEnv waits up to bound for the hamaster.env gcefake writes in
// state once its cluster is up, and returns it; gcefake exiting first
// fails the test.
func (g gcefakeProcess) awaitEnv(ctx context.Context, t *testing.T, state string, bound time.Duration) map[string]string {
	t.Helper()
	envFile := filepath.Join(state, "hamaster.env")
	g.Await(ctx, t, "gcefake's hamaster.env", bound, func() bool { return fileExists(envFile) })
	env, err := labcmdtest.ReadEnv(envFile)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// stop sends SIGTERM and fails the test unless gcefake exits cleanly
// within a minute (an exit with an error is reported, and the test goes
// on to look for what was left).
func (g gcefakeProcess) stop(t *testing.T) {
	t.Helper()
	if err := g.Stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("gcefake exit: %v\n%s", err, g.Output())
	}
}
