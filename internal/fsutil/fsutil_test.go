package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

// ReplaceFile and WriteFileAtomic replace a file whole, with its mode,
// and leave no temporary file behind.
func TestWritesReplaceWhole(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"ReplaceFile": ReplaceFile, "WriteFileAtomic": WriteFileAtomic} {
		dir := t.TempDir()
		path := filepath.Join(dir, "status.json")
		for _, content := range []string{"old\n", "new\n"} {
			if err := write(path, []byte(content), 0o640); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b, err := os.ReadFile(path)
			st, serr := os.Stat(path)
			if err != nil || serr != nil || string(b) != content || st.Mode().Perm() != 0o640 {
				t.Errorf("%s: %q (%v), mode %v (%v); want %q, 0640", name, b, err, st.Mode().Perm(), serr, content)
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("%s: left %v", name, ents)
		}
	}
}
