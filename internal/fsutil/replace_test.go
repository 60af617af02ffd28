package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestReplaceJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "status.json")
	if err := ReplaceJSON(path, map[string]int{"pid": 7}, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{\n  \"pid\": 7\n}\n" {
		t.Errorf("wrote %q (%v)", b, err)
	}
	if err := ReplaceJSON(path, func() {}, 0o644); err == nil {
		t.Error("ReplaceJSON(func) = nil, want an encode error")
	}
}

func TestWritePIDFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.pid")
	remove, err := WritePIDFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Errorf("pid file %q (%v)", b, err)
	}
	for range 2 { // the second finds it gone: no error
		if err := remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pid file still there: %v", err)
	}
	if _, err := WritePIDFile(filepath.Join(path, "no", "dir")); err == nil {
		t.Error("WritePIDFile in a missing dir = nil error")
	}
}

func TestReadJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := ReplaceJSON(good, map[string]int{"pid": 7}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadJSON[map[string]int](good, "x status"); err != nil || v["pid"] != 7 {
		t.Errorf("ReadJSON(good) = %v, %v", v, err)
	}
	if _, err := ReadJSON[map[string]int](bad, "x status"); err == nil || !strings.HasPrefix(err.Error(), "read x status "+bad+": ") {
		t.Errorf("ReadJSON(bad) error %v", err)
	}
	if _, err := ReadJSON[map[string]int](filepath.Join(dir, "none"), "x status"); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "read x status: ") {
		t.Errorf("ReadJSON(missing) error %v", err)
	}
}
