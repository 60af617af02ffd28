// Package proctree finds and kills the processes below a process, from
// /proc (Linux). sshd's per-connection processes start sessions of their
// own, so a process-group kill misses them; this does not.
package proctree

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Descendants lists the processes below pid, parents before children;
// none where /proc cannot be read.
func Descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for q := []int{pid}; len(q) > 0; q = q[1:] {
		for _, c := range children[q[0]] {
			out = append(out, c)
			q = append(q, c)
		}
	}
	return out
}

// KillDescendants sends SIGKILL to every process below pid, a few rounds
// over, for children forked meanwhile; pid itself is left alone.
func KillDescendants(pid int) {
	for range 5 {
		ds := Descendants(pid)
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			if p, err := os.FindProcess(d); err == nil {
				_ = p.Kill()
			}
		}
	}
}

// KillTree kills pid and every process below it, leaving pid no moment
// to fork a survivor: pid is stopped (SIGSTOP) first, and its stop
// waited for, so that a child it forks is either already below it, and
// killed, or never forked (sshd accepting a connection between its
// children's kill and its own stop forked a session that outlived both;
// and kill(2) returns before the stop takes effect: a fork under way
// then still ends, after the children were listed), then killed with
// SIGKILL. The caller still reaps pid; pid must be its live child.
func KillTree(pid int) {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	waitStopped(pid)
	KillDescendants(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
