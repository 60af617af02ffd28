package nodebin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

func TestFind(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, Name)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(bin, "--node-binary"); err != nil || got != bin {
		t.Errorf("Find(%s) = %q, %v", bin, got, err)
	}
	if _, err := Find(filepath.Join(dir, "missing"), "--node-binary"); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--node-binary") {
		t.Errorf("Find of a missing path: %v; want InvalidArgument naming the flag", err)
	}
	// Not next to the test binary: found on $PATH, else named.
	t.Setenv("PATH", dir)
	if got, err := Find("", "--node-binary"); err != nil || got != bin {
		t.Errorf("Find on $PATH = %q, %v", got, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Find("", "HAMASTER_NODE_BINARY"); !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "HAMASTER_NODE_BINARY") {
		t.Errorf("Find with nothing to find: %v", err)
	}
}
