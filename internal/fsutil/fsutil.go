// Package fsutil holds the file-writing rules every state file follows.
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hamaster/hamaster/errkind"
)

// WriteFileAtomic writes data to path through a temp file in the same
// directory: write, fsync, rename, fsync the directory. A state dir that is
// not writable is reported as errkind.InvalidArgument naming the path.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "state dir %s is not writable: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "state dir %s is not writable: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: rename: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
