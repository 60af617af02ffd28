// Package fsutil holds the file-writing rules every state file follows.
package fsutil

import (
	"errors"
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

// ReplaceFile writes data to a temporary file next to path and renames it
// over path, so that readers see the old or the new content, never a
// part. Unlike WriteFileAtomic it neither fsyncs nor makes the directory:
// for files rewritten often whose loss in a crash costs nothing (status
// and PID files, a daemon's rendered settings).
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	werr = errors.Join(werr, f.Chmod(perm), f.Close())
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	return nil
}
