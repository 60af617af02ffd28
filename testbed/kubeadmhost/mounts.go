package kubeadmhost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// markerDir holds one file per mount point a test bed created on this
// machine (e.g. etc-kubernetes for /etc/kubernetes): whichever test bed
// ends last removes the mount point when it is empty. /run, so that a
// reboot, which ends every test bed, forgets them. (The metal lab's name:
// it made them first.)
const markerDir = "/run/hamaster-metallab"

// lockPath is what every test bed locks (flock, exclusive) while it makes
// its hosts' mounts or removes mount points: without it a test bed ending
// could remove /etc/kubernetes between another's check that it exists and
// its hosts' mounts over it. A directory that every machine has and
// nothing removes, so the lock leaves no file behind.
const lockPath = "/run"

// lockWait bounds the wait for the lock (another test bed's host start-up
// or teardown holds it for well under a second).
const lockWait = 30 * time.Second

// LockMounts takes the test beds' machine-wide lock; the returned
// function releases it (once; later calls do nothing). Hold it from
// EnsureMountPoints until the hosts' mounts are made, and around
// ReleaseMountPoints.
func LockMounts(ctx context.Context) (func(), error) {
	f, err := os.Open(lockPath)
	if err != nil {
		return nil, fmt.Errorf("kubeadmhost: lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	err = wait.Until(ctx, 20*time.Millisecond, "the test beds' lock (flock "+lockPath+")", func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("kubeadmhost: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		})
	}, nil
}

// markerName is the marker file of mount point p.
func markerName(p string) string {
	return filepath.Join(markerDir, strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "-"))
}

// EnsureMountPoints creates each of dirs that the machine lacks (its
// parent must exist), with a marker saying a test bed created it, and
// returns the ones it created. Call it holding LockMounts.
func EnsureMountPoints(dirs []string) ([]string, error) {
	var created []string
	for _, d := range dirs {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return created, fmt.Errorf("kubeadmhost: create mount point %s: %w", d, err)
		}
		created = append(created, d)
		if err := os.MkdirAll(markerDir, 0o755); err != nil {
			return created, fmt.Errorf("kubeadmhost: %w", err)
		}
		if err := os.WriteFile(markerName(d), []byte(d+"\n"), 0o644); err != nil {
			return created, fmt.Errorf("kubeadmhost: %w", err)
		}
	}
	return created, nil
}

// ReleaseMountPoints removes every mount point a test bed created
// (marked) that is empty and that no mount namespace of the machine
// mounts over now (another test bed's hosts). Call it holding LockMounts.
func ReleaseMountPoints() error {
	ents, err := os.ReadDir(markerDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubeadmhost: %w", err)
	}
	var errs []error
	var used map[string]bool
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(markerDir, e.Name()))
		if err != nil {
			continue // another test bed removed it meanwhile
		}
		p := strings.TrimSpace(string(b))
		if !slices.Contains(Mounts(), p) {
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
				errs = append(errs, fmt.Errorf("kubeadmhost: remove mount point %s: %w", p, err))
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
