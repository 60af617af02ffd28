package proctree

import (
	"time"

	"golang.org/x/sys/unix"
)

// stopWait bounds waitStopped: a process in an uninterruptible sleep
// stops only when it leaves it.
const stopWait = 5 * time.Second

// waitStopped returns once pid, a child of the caller, has stopped or
// ended, or after stopWait: waitid(2) with WNOWAIT, which leaves the
// child's state for the caller's own wait (exec.Cmd.Wait still reaps
// it).
func waitStopped(pid int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
