//go:build fidelity || gcekubeadm

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
)

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// gcefakeProcess is bin/gcefake as an operator runs it, its output (both
// streams) in out.
type gcefakeProcess struct {
	cmd     *exec.Cmd
	out     bytes.Buffer
	exited  chan error
	stopped bool
}

// startGCEFake starts bin's gcefake with --state state and args; the
// test's end stops it (SIGTERM) unless the test has.
func startGCEFake(t *testing.T, bin, state string, args ...string) *gcefakeProcess {
	t.Helper()
	g := &gcefakeProcess{exited: make(chan error, 1)}
	g.cmd = exec.Command(filepath.Join(bin, "gcefake"), append([]string{"--state", state}, args...)...)
	g.cmd.Stdout, g.cmd.Stderr = &g.out, &g.out
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.exited <- g.cmd.Wait() }()
	t.Cleanup(func() {
		if !g.stopped {
			_ = g.cmd.Process.Signal(syscall.SIGTERM)
			<-g.exited
		}
	})
	return g
}

// awaitEnv waits up to bound for the hamaster.env gcefake writes in
// state once its cluster is up, and returns it; gcefake exiting first
// fails the test.
func (g *gcefakeProcess) awaitEnv(ctx context.Context, t *testing.T, state string, bound time.Duration) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	envFile := filepath.Join(state, "hamaster.env")
	if err := wait.Until(ctx, 100*time.Millisecond, "gcefake's hamaster.env", func() (bool, error) {
		select {
		case err := <-g.exited:
			g.stopped = true
			return false, fmt.Errorf("gcefake exited before writing hamaster.env: %v", err)
		default:
		}
		return fileExists(envFile), nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, g.out.String())
	}
	env, err := labcmdtest.ReadEnv(envFile)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// stop sends SIGTERM and fails the test unless gcefake exits cleanly
// within a minute (an exit with an error is reported, and the test goes
// on to look for what was left).
func (g *gcefakeProcess) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.exited:
		g.stopped = true
		if err != nil {
			t.Errorf("gcefake exit: %v\n%s", err, g.out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("gcefake still running 1m after SIGTERM:\n%s", g.out.String())
	}
}
