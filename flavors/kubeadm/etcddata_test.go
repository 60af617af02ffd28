package kubeadm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// etcdDataFixture is a master's files as etcdDataScript sees them, under
// a temporary root: hamaster's backup (B: the old etcd manifest, whose
// --data-dir is D, and its target file, an hour old), the Kubernetes
// dir (K: the upgraded etcd manifest, kubeadm's backups under K/tmp),
// and the data dir D, which the upgraded etcd touched (its marker).
type etcdDataFixture struct {
	root, b, k, d string
}

func newEtcdDataFixture(t *testing.T) etcdDataFixture {
	t.Helper()
	root := t.TempDir()
	x := etcdDataFixture{root: root, b: filepath.Join(root, "backup"), k: filepath.Join(root, "k8s"), d: filepath.Join(root, "var/lib/etcd")}
	writeFile(t, filepath.Join(x.b, "manifests/etcd.yaml"), "spec:\n  containers:\n  - command:\n    - etcd\n    - --data-dir="+x.d+"\n    image: registry.k8s.io/etcd:3.5.24-0\n", 0o600)
	writeFile(t, filepath.Join(x.b, "target"), "v1.34.4\n", 0o644)
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(x.b, "target"), hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(x.k, "manifests/etcd.yaml"), "image: registry.k8s.io/etcd:3.6.5-0\n", 0o600)
	writeFile(t, filepath.Join(x.d, "member/snap/db"), "touched", 0o600)
	writeFile(t, filepath.Join(x.d, "hamaster-broken-etcd"), "", 0o600)
	if err := os.Chmod(x.d, 0o700); err != nil {
		t.Fatal(err)
	}
	return x
}

// kubeadmBackup makes a kubeadm etcd backup named at stamp holding db,
// modified age ago.
func (x etcdDataFixture) kubeadmBackup(t *testing.T, stamp, db string, age time.Duration) string {
	t.Helper()
	e := filepath.Join(x.k, "tmp", "kubeadm-backup-etcd-"+stamp, "etcd")
	writeFile(t, filepath.Join(e, "member/snap/db"), db, 0o600)
	if err := os.Chmod(e, 0o700); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	for _, p := range []string{filepath.Join(e, "member/snap/db"), filepath.Join(e, "member/snap"), filepath.Join(e, "member"), e} {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// run runs etcdDataScript; how is "auto" (RollbackMaster's) or "inside"
// (the layout of a data dir that is a mount point).
func (x etcdDataFixture) run(ctx context.Context, t *testing.T, quiet, bound int, how string) (string, error) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "sh", "-c", etcdDataScript, "etcd-data", x.b, x.k, strconv.Itoa(quiet), strconv.Itoa(bound), how).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func writeFile(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// asides lists the data dirs etcdDataScript kept aside, beside the data
// dir or in it.
func (x etcdDataFixture) asides(t *testing.T) []string {
	t.Helper()
	var all []string
	for _, g := range []string{x.d + ".hamaster-rollback-*", x.d + "/hamaster-rollback-*"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m...)
	}
	return all
}

// aside is where a run of mode how that chose the time stamp keeps the
// touched data.
func (x etcdDataFixture) aside(how string) string {
	if how == "inside" {
		return x.d + "/hamaster-rollback-20261129T140100Z"
	}
	return x.d + ".hamaster-rollback-20261129T140100Z"
}

// crashedIn makes kubeadm's backup of the upgrade stamped stamp and the
// marker a run of mode how leaves when it enters phase ("swap": moving
// the touched data aside; "fill": copying the backup in), and returns
// the backup: what a run that crashed in that phase leaves.
func (x etcdDataFixture) crashedIn(t *testing.T, stamp, how, phase string) string {
	t.Helper()
	e := x.kubeadmBackup(t, stamp, "good", 0)
	writeFile(t, filepath.Join(x.b, "etcd-data"), phase+" "+e+" "+x.aside(how)+"\n", 0o644)
	return e
}

// staging is where a run of mode how copies kubeadm's backup.
func (x etcdDataFixture) staging(how string) string {
	if how == "inside" {
		return x.d + "/.hamaster-restoring"
	}
	return x.d + ".hamaster-restoring"
}

// moveAside does what a run of mode how does to the touched data before
// it copies the backup.
func (x etcdDataFixture) moveAside(t *testing.T, how string) {
	t.Helper()
	a := x.aside(how)
	if how != "inside" {
		if err := os.Rename(x.d, a); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Mkdir(a, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"member", "hamaster-broken-etcd"} {
		if err := os.Rename(filepath.Join(x.d, n), filepath.Join(a, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// untouched checks that the data dir still holds the touched data and
// nothing was kept aside.
func (x etcdDataFixture) untouched(t *testing.T) {
	t.Helper()
	if got := string(readFile(t, filepath.Join(x.d, "member/snap/db"))); got != "touched" || len(x.asides(t)) != 0 {
		t.Errorf("the data dir holds %q, kept aside %q; want it untouched", got, x.asides(t))
	}
}

// restored checks that D holds db (kubeadm's backup, 0700, without the
// broken etcd's marker and the copy's staging dir), that the upgraded
// etcd's manifest was moved out into B, and that the touched data is
// kept whole in aside, the only dir kept aside.
func (x etcdDataFixture) restored(t *testing.T, how, aside, db string) {
	t.Helper()
	if got := string(readFile(t, filepath.Join(x.d, "member/snap/db"))); got != db {
		t.Errorf("data dir's db = %q, want %q", got, db)
	}
	if fi, err := os.Stat(x.d); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v, %v; want mode 0700", fi.Mode(), err)
	}
	for _, p := range []string{filepath.Join(x.d, "hamaster-broken-etcd"), x.staging(how)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", p, err)
		}
	}
	if got := string(readFile(t, filepath.Join(aside, "member/snap/db"))); got != "touched" {
		t.Errorf("kept data's db = %q, want the touched one", got)
	}
	if _, err := os.Stat(filepath.Join(aside, "hamaster-broken-etcd")); err != nil {
		t.Errorf("the kept data lacks the broken etcd's marker: %v", err)
	}
	if _, err := os.Stat(filepath.Join(x.k, "manifests/etcd.yaml")); !os.IsNotExist(err) {
		t.Errorf("the upgraded etcd manifest is still in the kubelet's directory: %v", err)
	}
	if got := string(readFile(t, filepath.Join(x.b, "etcd.yaml.upgraded"))); !strings.Contains(got, "3.6.5-0") {
		t.Errorf("the upgraded etcd manifest moved aside: %q", got)
	}
	if got := x.asides(t); len(got) != 1 || got[0] != aside {
		t.Errorf("data dirs kept aside: %q, want [%s]", got, aside)
	}
}

func TestEtcdDataScript(t *testing.T) {
	t.Parallel()
	const stamp = "2026-11-29-14-00-00"
	tests := []struct {
		name string
		// setup returns the backup the script must restore ("" for
		// none) and the aside dir a crashed run chose ("": the script's).
		setup   func(t *testing.T, x etcdDataFixture, how string) (backup, aside string)
		wantErr string
	}{
		{"kubeadm's backup of this upgrade", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			return x.kubeadmBackup(t, stamp, "good", 0), ""
		}, ""},
		{"the newest of two", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			x.kubeadmBackup(t, "2026-11-29-13-55-00", "older", time.Minute)
			return x.kubeadmBackup(t, stamp, "good", 0), ""
		}, ""},
		{"only an earlier upgrade's backup", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			x.kubeadmBackup(t, "2026-11-28-10-00-00", "stale", 2*time.Hour)
			return "", ""
		}, ""},
		{"no kubeadm backup", func(t *testing.T, x etcdDataFixture, how string) (string, string) { return "", "" }, ""},
		{"a crash after the marker, before the move", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			e := x.crashedIn(t, stamp, how, "swap")
			return e, x.aside(how)
		}, ""},
		{"a crash half-way through the move aside", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			e := x.crashedIn(t, stamp, how, "swap")
			if err := os.Rename(filepath.Join(x.k, "manifests/etcd.yaml"), filepath.Join(x.b, "etcd.yaml.upgraded")); err != nil {
				t.Fatal(err)
			}
			if how == "inside" {
				// One entry moved of two.
				a := x.aside(how)
				if err := os.Mkdir(a, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(x.d, "member"), filepath.Join(a, "member")); err != nil {
					t.Fatal(err)
				}
			} else {
				x.moveAside(t, how)
			}
			return e, x.aside(how)
		}, ""},
		{"a crash during the copy", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			e := x.crashedIn(t, stamp, how, "fill")
			x.moveAside(t, how)
			writeFile(t, filepath.Join(x.staging(how), "member/snap/db"), "go", 0o600)
			return e, x.aside(how)
		}, ""},
		{"a crash half-way through the move in", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			e := x.crashedIn(t, stamp, how, "fill")
			x.moveAside(t, how)
			// The copy made whole with an entry of two moved in (inside),
			// or renamed into place (beside).
			writeFile(t, filepath.Join(x.staging(how), "member/snap/db"), "good", 0o600)
			writeFile(t, filepath.Join(x.staging(how), "member/wal/0.wal"), "good", 0o600)
			if how == "inside" {
				if err := os.Rename(filepath.Join(x.staging(how), "member"), filepath.Join(x.d, "member")); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(x.staging(how), "other"), "", 0o600)
			} else {
				if err := os.Rename(x.staging(how), x.d); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(x.d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			return e, x.aside(how)
		}, ""},
		{"a crash after the move in, before the marker", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			e := x.crashedIn(t, stamp, how, "fill")
			x.moveAside(t, how)
			writeFile(t, filepath.Join(x.d, "member/snap/db"), "good", 0o600)
			if err := os.Chmod(x.d, 0o700); err != nil {
				t.Fatal(err)
			}
			// The backup is not read again: the data dir is filled.
			if err := os.RemoveAll(filepath.Dir(e)); err != nil {
				t.Fatal(err)
			}
			return e, x.aside(how)
		}, ""},
		{"kubeadm's backup gone before the move", func(t *testing.T, x etcdDataFixture, how string) (string, string) {
			writeFile(t, filepath.Join(x.b, "etcd-data"), "swap "+filepath.Join(x.k, "tmp/kubeadm-backup-etcd-"+stamp+"/etcd")+" "+x.aside(how)+"\n", 0o644)
			return "", ""
		}, "is gone; etcd's data is untouched"},
	}
	for _, how := range []string{"auto", "inside"} {
		for _, tc := range tests {
			t.Run(how+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				x := newEtcdDataFixture(t)
				e, aside := tc.setup(t, x, how)
				out, err := x.run(ctx, t, 1, 1, how)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(out, tc.wantErr) {
						t.Fatalf("etcdDataScript = %v, %q; want an error saying %q", err, out, tc.wantErr)
					}
					x.untouched(t)
					return
				}
				if err != nil {
					t.Fatalf("etcdDataScript: %v: %s", err, out)
				}
				if e == "" {
					if out != "none" {
						t.Fatalf("etcdDataScript = %q, want none", out)
					}
					x.untouched(t)
					if _, err := os.Stat(filepath.Join(x.k, "manifests/etcd.yaml")); err != nil {
						t.Errorf("without a backup the etcd manifest was moved: %v", err)
					}
					return
				}
				fs := strings.Fields(out)
				prefix := x.d + ".hamaster-rollback-"
				if how == "inside" {
					prefix = x.d + "/hamaster-rollback-"
				}
				if len(fs) != 3 || fs[0] != "restored" || fs[1] != e || (aside != "" && fs[2] != aside) || !strings.HasPrefix(fs[2], prefix) {
					t.Fatalf("etcdDataScript = %q, want restored %s %s*", out, e, prefix)
				}
				x.restored(t, how, fs[2], "good")
				// A second run (a second rollback) changes nothing.
				out2, err := x.run(ctx, t, 1, 1, how)
				if err != nil || out2 != "done "+e+" "+fs[2] {
					t.Fatalf("a second etcdDataScript = %v, %q; want done %s %s", err, out2, e, fs[2])
				}
				x.restored(t, how, fs[2], "good")
			})
		}
	}
}

// While an etcd runs on the data dir (a process of this network
// namespace with its --data-dir), the script does not touch the data;
// once it stopped, a re-run restores.
func TestEtcdDataScriptWaitsForEtcd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	x := newEtcdDataFixture(t)
	x.kubeadmBackup(t, "2026-11-29-14-00-00", "good", 0)
	// An "etcd": sh blocked reading its stdin, with the data dir flag.
	etcd := exec.Command("sh", "-c", "read x", "etcd", "--data-dir="+x.d)
	stdin, err := etcd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = stdin.Close()
			_ = etcd.Wait()
		}
	}
	defer stop()
	out, err := x.run(ctx, t, 1, 1, "auto")
	if err == nil || !strings.Contains(out, "etcd still runs on "+x.d) {
		t.Fatalf("etcdDataScript with etcd running = %v, %q; want an error saying it still runs", err, out)
	}
	x.untouched(t)
	stop()
	out, err = x.run(ctx, t, 1, 1, "auto")
	if fs := strings.Fields(out); err != nil || len(fs) != 3 || fs[0] != "restored" {
		t.Fatalf("etcdDataScript after etcd stopped = %v, %q", err, out)
	} else {
		x.restored(t, "auto", fs[2], "good")
	}
}
