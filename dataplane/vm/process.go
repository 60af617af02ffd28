package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
const StopGrace = 10 * time.Second

// Process is a program (a hamaster-node replica or LB) started by Start in
// its own session, its output appended to a log file, and reaped by a
// goroutine when it exits, so it never lingers as a zombie of its parent.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

// Start starts bin with args; the log file's directory is created.
func Start(bin string, args []string, logPath string) (*Process, error) {
	return start(bin, args, logPath, false)
}

// StartTied is Start for a process that must not outlive its parent (a
// fake's VM processes, unlike the local provider's replicas, which
// outlive the CLI that started them): where the kernel can (Linux), it
// is killed when the parent dies, even by SIGKILL.
func StartTied(bin string, args []string, logPath string) (*Process, error) {
	return start(bin, args, logPath, true)
}

func start(bin string, args []string, logPath string, tied bool) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if tied {
		dieWithParent(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ExitReason says how the process ended ("exit status 1", "signal:
// killed"), or "" while it runs.
func (p *Process) ExitReason() string {
	if p.Running() {
		return ""
	}
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// Signal sends sig to a running process.
func (p *Process) Signal(sig os.Signal) {
	if p.Running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM, SIGKILL after StopGrace, and waits until the process
// is gone. Safe on nil and on an exited process.
func (p *Process) Stop() {
	if p == nil || !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(StopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the last n lines of the log, for error messages.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
