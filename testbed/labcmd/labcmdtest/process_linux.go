package labcmdtest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/internal/wait"
)

// Process is a test bed's command running as an operator runs it, its
// output (both streams) collected. It dies with the test process
// (Pdeathsig), and the test's end stops it (SIGTERM) unless the test has.
type Process struct {
	name   string
	cmd    *exec.Cmd
	out    syncbuf.Buffer
	exited chan error
	done   bool
}

// Start starts bin with args.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{name: filepath.Base(bin), cmd: exec.Command(bin, args...), exited: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.exited
		}
	})
	return p
}

// Output is what the command has printed.
func (p *Process) Output() string { return p.out.String() }

// Await checks cond every 100ms until it holds, for at most bound; the
// command exiting first, or the bound passing, fails the test (with the
// command's output).
func (p *Process) Await(ctx context.Context, t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := wait.Until(ctx, 100*time.Millisecond, what, func() (bool, error) {
		select {
		case err := <-p.exited:
			p.done = true
			return false, fmt.Errorf("%s exited while waiting for %s: %v", p.name, what, err)
		default:
		}
		return cond(), nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
}

// Stop sends sig and returns the command's exit; it fails the test when
// the command is still running a minute later.
func (p *Process) Stop(t testing.TB, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.done = true
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s still running 1m after %v:\n%s", p.name, sig, p.Output())
	}
	return nil
}
