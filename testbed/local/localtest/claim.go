package localtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// ClaimSubnet reserves the given 127.0.n.0/24 for the test, as AllocSubnet
// does for the one it picks (tests whose documented commands name a fixed
// address, such as the demo cluster's, need that one). It waits, bounded by
// wait, while another test process holds it; it fails the test when the
// subnet stays taken or something outside the tests listens on it.
func ClaimSubnet(t testing.TB, n int, wait time.Duration) {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "hamaster-test-subnets")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, strconv.Itoa(n))
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprint(f, os.Getpid())
			f.Close()
			t.Cleanup(func() { os.Remove(path) })
			break
		}
		if !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if pid, _ := strconv.Atoi(string(b)); pid > 0 && syscall.Kill(pid, 0) != nil {
			os.Remove(path) // its test process is gone
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("subnet 127.0.%d.0/24 is still held by test process %s after %s (%s)", n, b, wait, path)
		}
		<-tick.C // another test process holds it: an external resource, polled
	}
	if !subnetFree(n) {
		t.Fatalf("subnet 127.0.%d.0/24 is in use outside the tests (a 'make demo' running?)", n)
	}
}
