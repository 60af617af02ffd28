package metallabtest

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/kubelet"
)

// UnstartableAPIServer is the kube-apiserver of "an unstartable
// release": a binary that exits at once, as a release built for another
// architecture does. Unstartable puts it in place of a version's real
// kube-apiserver in a directory made by LinkBinaries.
const UnstartableAPIServer = "#!/bin/sh\necho 'kube-apiserver: cannot execute binary file: Exec format error (an unstartable release, the test says)' >&2\nexit 126\n"

// LinkBinaries makes a directory of versions whose files link to the
// real binaries of src (Kubeadm's binDir), so that a test can swap one
// binary (Unstartable) without touching the shared cache. The lab takes
// it as metallab.Options.BinDir.
func LinkBinaries(t testing.TB, src string, versions ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, v := range versions {
		if err := os.MkdirAll(filepath.Join(dst, v), 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(filepath.Join(src, v))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if err := os.Symlink(filepath.Join(src, v, e.Name()), filepath.Join(dst, v, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

// Unstartable makes version's kube-apiserver in binDir (a LinkBinaries
// directory) UnstartableAPIServer until the returned function puts the
// real one back.
func Unstartable(t testing.TB, binDir, version string) (restore func()) {
	t.Helper()
	bin := filepath.Join(binDir, version, "kube-apiserver")
	real, err := os.Readlink(bin)
	if err != nil {
		t.Fatalf("%s: %v (not a LinkBinaries directory?)", bin, err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(UnstartableAPIServer), 0o755); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(bin); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, bin); err != nil {
			t.Fatal(err)
		}
	}
}

// BrokenEtcdMarker is the file BrokenEtcdScript writes into the etcd
// data dir it is started on.
const BrokenEtcdMarker = "hamaster-broken-etcd"

// BrokenEtcdScript is the etcd of "an etcd release that writes to its
// data dir and then fails" (as an etcd that migrates its storage on
// start, then cannot serve, would): it writes BrokenEtcdMarker into its
// --data-dir (kubeadm's default /var/lib/etcd without one) and exits 1.
const BrokenEtcdScript = `#!/bin/sh
d=/var/lib/etcd
for a in "$@"; do case $a in --data-dir=*) d=${a#--data-dir=};; esac; done
date -u > "$d/` + BrokenEtcdMarker + `"
echo "etcd: wrote to $d, then failed (a broken etcd release, the test says)" >&2
exit 1
`

// BrokenEtcd makes the etcd image of tag (registry.k8s.io/etcd:<tag>)
// BrokenEtcdScript on the hosts of a lab whose Options.BinDir is binDir,
// a LinkBinaries directory (the shared cache is never written): the test
// bed's kubelet runs kubelet.EtcdOverrideDir/<tag> of its binaries
// directory in place of its own etcd, read when it starts an etcd pod.
// The returned function (and the test's cleanup) removes it.
func BrokenEtcd(t testing.TB, binDir, tag string) (disarm func()) {
	t.Helper()
	links, err := filepath.Glob(filepath.Join(binDir, "v*", "kubeadm"))
	if err != nil || len(links) == 0 {
		t.Fatalf("%s holds no version's kubeadm (%v)", binDir, err)
	}
	if fi, err := os.Lstat(links[0]); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s: not a LinkBinaries directory (%s is no link: %v)", binDir, links[0], err)
	}
	dir := filepath.Join(binDir, kubelet.EtcdOverrideDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, tag)
	if err := os.WriteFile(p, []byte(BrokenEtcdScript), 0o755); err != nil {
		t.Fatal(err)
	}
	disarmed := false
	disarm = func() {
		t.Helper()
		if disarmed {
			return
		}
		disarmed = true
		if err := os.Remove(p); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(disarm)
	return disarm
}

// EtcdImageTag is the etcd image tag kubeadm of version (binDir's, a
// Kubeadm or LinkBinaries directory) writes into its etcd manifest
// (`kubeadm config images list`, read offline with the version given).
func EtcdImageTag(t testing.TB, binDir, version string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, version, "kubeadm"), "config", "images", "list", "--kubernetes-version", version).Output()
	if err != nil {
		t.Fatalf("kubeadm %s config images list: %v", version, err)
	}
	for _, l := range strings.Fields(string(out)) {
		if name, tag, ok := strings.Cut(path.Base(l), ":"); ok && name == "etcd" {
			return tag
		}
	}
	t.Fatalf("kubeadm %s lists no etcd image: %s", version, out)
	return ""
}
