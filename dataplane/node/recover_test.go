package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/etcdmember/etcdtest"
)

// TestRestoreSnapshotTo: a snapshot of a live member restores into a new
// data directory (etcd's member/snap and member/wal); a snapshot whose
// bytes were changed fails its hash check and leaves no directory.
func TestRestoreSnapshotTo(t *testing.T) {
	t.Parallel()
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := ec.Client(ctx, t)
	if _, err := cli.Raw().Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.db")
	if _, err := cli.SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "etcd")
	if err := RestoreSnapshotTo(snap, "m0", "https://10.0.0.2:2380", out, "t1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"member/snap/db", "member/wal"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("restored data: %v", err)
		}
	}
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(dir, "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	badOut := filepath.Join(dir, "bad")
	if err := RestoreSnapshotTo(bad, "m0", "https://10.0.0.2:2380", badOut, "t2"); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Errorf("restore of a changed snapshot: %v; want its hash check to fail", err)
	}
	if _, err := os.Stat(badOut); !os.IsNotExist(err) {
		t.Errorf("a failed restore left %s: %v", badOut, err)
	}
}
