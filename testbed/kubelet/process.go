package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/hamaster/hamaster/internal/ctxutil"
)

// Restart backoff of a container that keeps exiting: the real kubelet's
// CrashLoopBackOff starts at 10 s and caps at 5 min; the test bed's
// processes start faster, so this starts at 500 ms and caps at 20 s, and
// resets after a run of stableRun, as the real one resets after 10 min.
const (
	restartInitial = 500 * time.Millisecond
	restartMax     = 20 * time.Second
	stableRun      = 30 * time.Second
	// hostPATH is the PATH a pod's process gets (a container gets its
	// image's environment, not the kubelet's).
	hostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// containerState is what the status of a container reports.
type containerState struct {
	Running   bool
	PID       int
	StartedAt time.Time
	Restarts  int32
	// LastExit describes the last exit ("exit status 1"), "" if none.
	LastExit   string
	LastExitAt time.Time
	ExitCode   int32
}

// container runs one ProcessSpec until its context ends, restarting it
// with backoff whenever it exits (restartPolicy Always, what kubeadm's
// static pods have).
type container struct {
	spec    ProcessSpec
	logDir  string // <podLogsDir>/<ns>_<pod>_<uid>/<container>
	grace   time.Duration
	log     *slog.Logger
	done    chan struct{}
	kill    chan string // restart requests (a failed liveness probe)
	mu      sync.Mutex
	st      containerState
	force   bool   // stop with SIGKILL, no grace period (StopPodSandbox)
	changed func() // called after every state change
}

func startContainer(ctx context.Context, spec ProcessSpec, logDir string, grace time.Duration, log *slog.Logger, changed func()) *container {
	c := &container{spec: spec, logDir: logDir, grace: grace, log: log.With("container", spec.Container), done: make(chan struct{}), kill: make(chan string, 1), changed: changed}
	go c.loop(ctx)
	return c
}

func (c *container) state() containerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *container) update(f func(*containerState)) {
	c.mu.Lock()
	f(&c.st)
	c.mu.Unlock()
	c.changed()
}

// restart stops the running process (SIGTERM, SIGKILL after the grace
// period); the container then restarts it as after an exit.
func (c *container) restart(reason string) {
	select {
	case c.kill <- reason:
	default:
	}
}

// wait returns once the process is stopped for good (ctx ended).
func (c *container) wait() { <-c.done }

// forceStop makes the coming stop a SIGKILL without grace period.
func (c *container) forceStop() {
	c.mu.Lock()
	c.force = true
	c.mu.Unlock()
}

func (c *container) loop(ctx context.Context) {
	defer close(c.done)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor = restartInitial, restartMax, 0.2
	for {
		started := time.Now()
		err := c.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > stableRun {
			b.Reset()
		}
		delay := b.NextBackOff()
		c.log.Warn("container exited; restarting", "err", err, "in", delay)
		if !ctxutil.Sleep(ctx, delay) {
			return
		}
		c.update(func(s *containerState) { s.Restarts++ })
	}
}

// runOnce starts the process, waits for it to exit or for ctx to end (then
// SIGTERM to its process group, SIGKILL after the grace period), and
// records the exit.
func (c *container) runOnce(ctx context.Context) error {
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return c.exited(fmt.Errorf("log dir: %w", err), -1)
	}
	restarts := c.state().Restarts
	logf, err := os.OpenFile(filepath.Join(c.logDir, strconv.Itoa(int(restarts))+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return c.exited(fmt.Errorf("log file: %w", err), -1)
	}
	defer logf.Close()
	select { // a restart asked of an earlier run
	case <-c.kill:
	default:
	}
	cmd := exec.Command(c.spec.Path, c.spec.Args...)
	cmd.Env = append([]string{"PATH=" + hostPATH}, c.spec.Env...)
	cmd.Dir = c.spec.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return c.exited(fmt.Errorf("start %s: %w", c.spec.Path, err), 128)
	}
	pid := cmd.Process.Pid
	c.log.Info("container started", "pid", pid, "path", c.spec.Path)
	c.update(func(s *containerState) { s.Running, s.PID, s.StartedAt = true, pid, time.Now() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return c.exited(err, exitCode(cmd))
	case <-ctx.Done():
	case reason := <-c.kill:
		c.log.Warn("stopping container to restart it", "pid", pid, "reason", reason)
	}
	// Stop: the whole process group, as a runtime stops a container.
	c.mu.Lock()
	force := c.force
	c.mu.Unlock()
	if force {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		err = <-exited
	} else {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		t := time.NewTimer(c.grace)
		select {
		case err = <-exited:
		case <-t.C:
			c.log.Warn("container did not stop within its grace period; killing", "grace", c.grace)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			err = <-exited
		}
		t.Stop()
	}
	c.log.Info("container stopped", "pid", pid, "err", err)
	return c.exited(err, exitCode(cmd))
}

func (c *container) exited(err error, code int32) error {
	if err == nil {
		err = errors.New("exited with status 0")
	}
	c.update(func(s *containerState) {
		s.Running, s.PID = false, 0
		s.LastExit, s.LastExitAt, s.ExitCode = err.Error(), time.Now(), code
	})
	return err
}

func exitCode(cmd *exec.Cmd) int32 {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(cmd.ProcessState.ExitCode())
}
