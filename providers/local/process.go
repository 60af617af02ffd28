package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/internal/wait"
)

// proc is a detached process described by a pid file.
type proc struct {
	pidFile string
	// marker must appear in the process's command line for the pid to be
	// ours (pid files outlive reboots and pids get reused).
	marker string
}

// pid returns the live pid, or 0 when the pid file is missing, stale
// (no such process, a zombie, or a process that is not ours).
func (p proc) pid() int {
	b, err := os.ReadFile(p.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if !isOurs(pid, p.marker) {
		return 0
	}
	return pid
}

func isOurs(pid int, marker string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	// A process caught inside execve shows an empty command line for a
	// moment (the kernel sets the new arguments up after the parent of a
	// vfork resumes): look again briefly before deciding.
	for i := 0; err == nil && len(cmdline) == 0 && i < 50; i++ {
		time.Sleep(2 * time.Millisecond)
		cmdline, err = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	}
	if err != nil {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Field 3 is the state; Z is a zombie (dead, not yet reaped).
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return bytes.Contains(cmdline, []byte(marker))
}

// start launches a detached process (own session, output to logPath)
// and writes its pid file, which is how later runs find it again.
func start(bin string, args []string, logPath, pidFile string) (*vm.Process, error) {
	p, err := vm.Start(bin, args, logPath)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(p.Pid())+"\n"), 0o600); err != nil {
		p.Stop()
		return nil, fmt.Errorf("write pid file %s: %w", pidFile, err)
	}
	return p, nil
}

// stop sends SIGTERM, waits up to grace for the process to go, then
// SIGKILLs and waits again. Absent is success.
func (p proc) stop(ctx context.Context, grace time.Duration) error {
	pid := p.pid()
	if pid == 0 {
		_ = os.Remove(p.pidFile)
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(ctx, pid, p.marker, grace) {
		_ = os.Remove(p.pidFile)
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(ctx, pid, p.marker, 10*time.Second) {
		_ = os.Remove(p.pidFile)
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop pid %d: %w", pid, ctx.Err())
	}
	return errors.New("process " + strconv.Itoa(pid) + " survived SIGKILL")
}

func waitGone(ctx context.Context, pid int, marker string, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !isOurs(pid, marker) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// signal sends sig to the live process, if any.
func (p proc) signal(sig syscall.Signal) bool {
	if pid := p.pid(); pid != 0 {
		return syscall.Kill(pid, sig) == nil
	}
	return false
}

// poll calls check every 25 ms until it returns true or an error, or ctx
// ends; what describes the wait for the error message.
func poll(ctx context.Context, what string, check func() (bool, error)) error {
	return wait.Until(ctx, 25*time.Millisecond, what, check)
}
