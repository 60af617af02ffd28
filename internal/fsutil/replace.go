package fsutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// ReplaceJSON writes v, indented and ending in a newline, to path with
// ReplaceFile: the rule of the status and config files a daemon rewrites
// while others read them.
func ReplaceJSON(path string, v any, perm os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return ReplaceFile(path, append(b, '\n'), perm)
}

// WritePIDFile writes this process's pid and a newline to path with
// ReplaceFile. remove deletes the file again; a file already gone is no
// error.
func WritePIDFile(path string) (remove func() error, err error) {
	if err := ReplaceFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	return func() error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}, nil
}

// ReadJSON reads the JSON file at path (one ReplaceJSON wrote) into a T;
// what names it in errors ("lb status": "read lb status: …").
func ReadJSON[T any](path, what string) (T, error) {
	var v T
	b, err := os.ReadFile(path)
	if err != nil {
		return v, fmt.Errorf("read %s: %w", what, err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	return v, nil
}
