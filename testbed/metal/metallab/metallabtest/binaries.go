package metallabtest

import (
	"os"
	"path/filepath"
	"testing"
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
