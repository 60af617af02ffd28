package metallab

import (
	"bufio"
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
	"sync"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// recordFile, in the state directory, lists what a lab made, written
// before it makes it.
const recordFile = "metallab.json"

// markerDir holds one file per mount point a lab created on this machine
// (e.g. etc-kubernetes for /etc/kubernetes): whichever lab ends last
// removes the mount point when it is empty. /run, so that a reboot, which
// ends every lab, forgets them.
const markerDir = "/run/hamaster-metallab"

// lockPath is what every lab locks (flock, exclusive) while it makes its
// hosts' mounts or removes mount points: without it a lab ending could
// remove /etc/kubernetes between another lab's check that it exists and
// its hosts' mounts over it. A directory that every machine has and
// nothing removes, so the lock leaves no file behind.
const lockPath = "/run"

// lockWait bounds the wait for the lock (another lab's host start-up or
// teardown holds it for well under a second).
const lockWait = 30 * time.Second

// lockMounts takes the labs' machine-wide lock; the returned function
// releases it (once; later calls do nothing).
func lockMounts(ctx context.Context) (func(), error) {
	f, err := os.Open(lockPath)
	if err != nil {
		return nil, fmt.Errorf("metallab: lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	err = wait.Until(ctx, 20*time.Millisecond, "the labs' lock (flock "+lockPath+")", func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("metallab: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		})
	}, nil
}

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
	if unlock, err := lockMounts(ctx); err != nil {
		errs = append(errs, err)
	} else {
		if err := releaseMountPoints(); err != nil {
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

// markerName is the marker file of mount point p.
func markerName(p string) string {
	return filepath.Join(markerDir, strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "-"))
}

// ensureMountPoints creates each of dirs that the machine lacks (its
// parent must exist), with a marker saying a lab created it, and returns
// the ones it created.
func ensureMountPoints(dirs []string) ([]string, error) {
	var created []string
	for _, d := range dirs {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return created, fmt.Errorf("metallab: create mount point %s: %w", d, err)
		}
		created = append(created, d)
		if err := os.MkdirAll(markerDir, 0o755); err != nil {
			return created, fmt.Errorf("metallab: %w", err)
		}
		if err := os.WriteFile(markerName(d), []byte(d+"\n"), 0o644); err != nil {
			return created, fmt.Errorf("metallab: %w", err)
		}
	}
	return created, nil
}

// releaseMountPoints removes every mount point a lab created (marked in
// markerDir) that is empty and that no mount namespace of the machine
// mounts over now (another lab's hosts).
func releaseMountPoints() error {
	ents, err := os.ReadDir(markerDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	var errs []error
	var used map[string]bool
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(markerDir, e.Name()))
		if err != nil {
			continue // another lab removed it meanwhile
		}
		p := strings.TrimSpace(string(b))
		if !slices.Contains(hostMounts(), p) {
			continue
		}
		if used == nil {
			used = mountedAnywhere()
		}
		if used[p] {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				errs = append(errs, fmt.Errorf("metallab: remove mount point %s: %w", p, err))
				continue
			}
			// Something else put files there: it is theirs now.
		}
		_ = os.Remove(filepath.Join(markerDir, e.Name()))
	}
	_ = os.Remove(markerDir) // only when empty
	return errors.Join(errs...)
}

// mountedAnywhere lists the mount points of every mount namespace of the
// machine (one process's mountinfo per namespace).
func mountedAnywhere() map[string]bool {
	seen := map[string]bool{}
	out := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		seen[ns] = true
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// "id parent major:minor root mountpoint ..."
			if fs := strings.Fields(sc.Text()); len(fs) > 4 {
				out[fs[4]] = true
			}
		}
		f.Close()
	}
	return out
}
