package metallab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
)

// recordFile, in the state directory, lists what a lab made, written
// before it makes it.
const recordFile = "metallab.json"

// record is what a lab made, for its teardown and for Cleanup after the
// lab was killed.
type record struct {
	path string

	// PID of the process that runs the lab.
	PID int `json:"pid"`
	// Third octet of the lab's /24.
	Third int `json:"third,omitempty"`
	// Switch namespace and the operator's uplink interface.
	Switch string `json:"switch,omitempty"`
	Uplink string `json:"uplink,omitempty"`
	// Namespaces of the hosts.
	Namespaces []string `json:"namespaces,omitempty"`
	// MountPoints this lab created on the machine.
	MountPoints []string `json:"mount_points,omitempty"`
	// Files (and directories) the lab writes in the state directory,
	// relative to it; the record itself goes last.
	Files []string `json:"files"`
	// CreatedDir: the lab created the state directory, and removes it
	// when empty.
	CreatedDir bool `json:"created_dir"`
}

func (r *record) save() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("metallab: record: %w", err)
	}
	return writeAtomic(r.path, append(b, '\n'), 0o644)
}

func loadRecord(dir string) (*record, error) {
	p := filepath.Join(dir, recordFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	r := &record{path: p}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("metallab: %s: %w", p, err)
	}
	return r, nil
}

// sweepPrevious removes a previous lab's leftovers recorded in dir, or
// refuses when that lab still runs.
func sweepPrevious(ctx context.Context, dir string, log *slog.Logger) error {
	r, err := loadRecord(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if labRuns(r.PID) {
		return fmt.Errorf("metallab: %s is in use by the lab of process %d (stop it first: kill -TERM %d)", dir, r.PID, r.PID)
	}
	log.Info("removing a previous lab's leftovers", "dir", dir, "pid", r.PID, "namespaces", r.Namespaces)
	return teardown(ctx, r, log)
}

// Cleanup removes what a lab recorded in dir: its processes, namespaces,
// bridge, uplink, unused mount points and files. It refuses while the
// lab's process still runs (stop that with SIGTERM instead). A dir with no
// record is success: nothing to do.
func Cleanup(ctx context.Context, dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := Preflight(); err != nil {
		return err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	return sweepPrevious(ctx, dir, log)
}

// labRuns reports whether pid is a running lab process (its command line
// names metallab: bin/metallab or a test binary of these packages), not a
// reused pid.
func labRuns(pid int) bool {
	if pid <= 0 || pid == os.Getpid() {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && strings.Contains(string(b), "metallab")
}

// teardown removes everything r lists; what is gone already is success.
func teardown(ctx context.Context, r *record, log *slog.Logger) error {
	var errs []error
	for _, ns := range r.Namespaces {
		if err := killNamespace(ctx, ns, log); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range append(slices.Clone(r.Namespaces), r.Switch) {
		if ns == "" {
			continue
		}
		if err := ipTolerant(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// The switch namespace took the uplink's peer with it, and so the
	// uplink; this is for a lab killed half-way through making them.
	if r.Uplink != "" {
		if err := ipTolerant(ctx, "link", "del", r.Uplink); err != nil {
			errs = append(errs, err)
		}
	}
	if unlock, err := kubeadmhost.LockMounts(ctx); err != nil {
		errs = append(errs, err)
	} else {
		if err := kubeadmhost.ReleaseMountPoints(); err != nil {
			errs = append(errs, err)
		}
		unlock()
	}
	dir := filepath.Dir(r.path)
	for _, f := range r.Files {
		if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
			errs = append(errs, fmt.Errorf("metallab: %w", err))
		}
		_ = os.Remove(filepath.Join(dir, f+".tmp"))
	}
	if len(errs) > 0 {
		// Keep the record: Cleanup can try again.
		return errors.Join(errs...)
	}
	if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("metallab: %w", err)
	}
	if r.CreatedDir {
		_ = os.Remove(dir) // only when empty
	}
	log.Debug("lab removed", "dir", dir)
	return nil
}

// killWait bounds each round of killNamespace.
const killWait = 5 * time.Second

// killNamespace ends every process in network namespace ns: SIGTERM (so
// keepalived gives up its VIP and sshd its sessions), then SIGKILL for
// what is left after killWait.
func killNamespace(ctx context.Context, ns string, log *slog.Logger) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids, err := nsPIDs(ctx, ns)
		if err != nil || len(pids) == 0 {
			return err
		}
		log.Debug("signalling the processes of a host", "ns", ns, "signal", sig, "pids", pids)
		for _, p := range pids {
			_ = syscall.Kill(p, sig)
		}
		wctx, cancel := context.WithTimeout(ctx, killWait)
		err = wait.Until(wctx, 20*time.Millisecond, "the processes of "+ns+" to end", func() (bool, error) {
			left, err := nsPIDs(wctx, ns)
			return len(left) == 0, err
		})
		cancel()
		if err == nil {
			return nil
		}
		if sig == syscall.SIGKILL {
			return fmt.Errorf("metallab: %w", err)
		}
	}
	return nil
}

// nsPIDs lists the processes in network namespace ns (none when the
// namespace is gone).
func nsPIDs(ctx context.Context, ns string) ([]int, error) {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file") {
			return nil, nil
		}
		return nil, fmt.Errorf("metallab: ip netns pids %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}
