// Package procid names a process so that another process can prove it
// gone: the kernel's boot (boot_id), the PID namespace, the PID and the
// process's start time. Two processes of the same boot and PID namespace
// see one process table, where a PID whose start time differs is another
// process (the PID was reused). Linux only (/proc); elsewhere nothing is
// ever proven gone.
package procid

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// ID identifies one process of one boot of one machine.
type ID struct {
	// Boot is /proc/sys/kernel/random/boot_id: random per boot, so never
	// the same on two machines.
	Boot string `json:"boot_id,omitempty"`
	// PIDNS is the PID namespace (/proc/self/ns/pid's link, e.g.
	// "pid:[4026531836]").
	PIDNS string `json:"pid_ns,omitempty"`
	PID   int    `json:"pid"`
	// Start is the process's start time in clock ticks after boot
	// (/proc/<pid>/stat field 22).
	Start uint64 `json:"start,omitempty"`
}

// Self is this process's ID; Boot is "" where /proc cannot tell.
func Self() ID {
	return of("/proc", os.Getpid())
}

func of(proc string, pid int) ID {
	id := ID{PID: pid}
	boot, err := os.ReadFile(proc + "/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	ns, err := os.Readlink(proc + "/self/ns/pid")
	if err != nil {
		return id
	}
	start, _, err := stat(proc, pid)
	if err != nil {
		return id
	}
	id.Boot, id.PIDNS, id.Start = strings.TrimSpace(string(boot)), ns, start
	return id
}

// Gone reports whether the process id names has provably ended, as seen
// from this process: same boot and PID namespace, and its PID is free, a
// zombie (every thread exited) or another process (a different start
// time). Anything it cannot prove (another machine or namespace, an
// unreadable /proc, a missing ID) is not gone.
func Gone(id ID) bool {
	return gone("/proc", id)
}

func gone(proc string, id ID) bool {
	me := of(proc, os.Getpid())
	if id.Boot == "" || me.Boot == "" || id.Boot != me.Boot || id.PIDNS != me.PIDNS || id.PID <= 0 || id.Start == 0 {
		return false
	}
	start, state, err := stat(proc, id.PID)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	return start != id.Start || state == "Z" || state == "X"
}

// stat reads the start time and state of pid from /proc/<pid>/stat.
func stat(proc string, pid int) (start uint64, state string, err error) {
	b, err := os.ReadFile(proc + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", errors.New("procid: unreadable stat of pid " + strconv.Itoa(pid))
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 {
		return 0, "", errors.New("procid: short stat of pid " + strconv.Itoa(pid))
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, "", errors.New("procid: stat of pid " + strconv.Itoa(pid) + ": start time: " + err.Error())
	}
	return start, f[0], nil
}
