package kubeadm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWithManifestFlag: --force-new-cluster goes into kubeadm's own etcd
// manifest on a line of its own after --data-dir, every other line kept;
// twice is once; a manifest without --data-dir is refused.
func TestWithManifestFlag(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile("testdata/etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := WithManifestFlag(orig, "--force-new-cluster")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(string(orig), "    - --data-dir=/var/lib/etcd\n", "    - --data-dir=/var/lib/etcd\n    - --force-new-cluster\n", 1); string(got) != want {
		t.Errorf("WithManifestFlag:\n%s\nwant:\n%s", got, want)
	}
	again, err := WithManifestFlag(got, "--force-new-cluster")
	if err != nil || string(again) != string(got) {
		t.Errorf("WithManifestFlag twice: %v\n%s", err, again)
	}
	if _, err := WithManifestFlag([]byte("spec:\n  containers:\n  - command:\n    - etcd\n"), "--force-new-cluster"); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("WithManifestFlag without --data-dir: %v", err)
	}
}

func TestEtcdDataDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		manifest, want string
		ok             bool
	}{
		{"    - --data-dir=/var/lib/etcd\n", "/var/lib/etcd", true},
		{"    - --data-dir=/var/lib/etcd/\n", "/var/lib/etcd", true},
		{"    - \"--data-dir=/data/etcd\"\n", "/data/etcd", true},
		{"    - --data-dir=etcd\n", "", false},
		{"    - --data-dir=/\n", "", false},
		{"    - --name=a\n", "", false},
	} {
		got, err := etcdDataDir([]byte(tc.manifest))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("etcdDataDir(%q) = %q, %v; want %q, ok %v", tc.manifest, got, err, tc.want, tc.ok)
		}
	}
}

// shMachine runs every machine's commands in this machine's sh, as the
// provider's SSH runs them on a master.
type shMachine struct{}

func (shMachine) DialMachine(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no tunnels here")
}
func (shMachine) MachineHostname(string, string) string { return "" }
func (shMachine) RunOnMachine(ctx context.Context, _, cmd string) ([]byte, []byte, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Stdout, c.Stderr = &stdout, &stderr
	return stdout.Bytes(), stderr.Bytes(), c.Run()
}

// TestUploadRestoredTree: a restored data directory (a tree larger than
// one upload piece, so several pieces) arrives whole through commands
// short enough for one argument of sh -c, and unpacks with tar as the
// recovery's swap unpacks it.
func TestUploadRestoredTree(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	big := make([]byte, 3*uploadChunk+123)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"member/snap/db": big, "member/wal/0000000000000000-0000000000000000.wal": []byte("wal")}
	for name, data := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	archive, err := tarGz(src)
	if err != nil {
		t.Fatal(err)
	}
	f := &Flavor{m: shMachine{}, log: slog.New(slog.DiscardHandler)}
	dst := t.TempDir()
	up := filepath.Join(dst, "in", "restore.tar.gz")
	if err := f.upload(context.Background(), "m", up, archive); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dst, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("tar", "-xzf", up, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, b)
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after the upload: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
		}
	}
	if _, err := os.Stat(up + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the partial upload stays: %v", err)
	}
}
