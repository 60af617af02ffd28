package metallab

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// The kubelet service as systemd's Restart=always: an exited process is
// started again after the delay, restart starts a new one at once, close
// stops it and it stays stopped.
func TestServiceRestarts(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	// Each run appends a line; the first exits (a crash), later ones run
	// until signalled.
	script := `echo run >> "$1"; [ "$(wc -l < "$1")" -eq 1 ] && exit 1; exec tail -f /dev/null`
	s := &service{name: "test", argv: []string{"sh", "-c", script, "sh", starts}, logPath: filepath.Join(dir, "log"),
		delay: 10 * time.Millisecond, log: slog.New(slog.DiscardHandler),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	defer s.close(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runs := func(n int) func() (bool, error) {
		return func() (bool, error) {
			b, _ := os.ReadFile(starts)
			s.mu.Lock()
			running := s.proc != nil
			s.mu.Unlock()
			return strings.Count(string(b), "run") == n && running, nil
		}
	}
	if err := wait.Until(ctx, 5*time.Millisecond, "the crashed process started again", runs(2)); err != nil {
		t.Fatal(err)
	}
	s.restart()
	if err := wait.Until(ctx, 5*time.Millisecond, "a restart", runs(3)); err != nil {
		t.Fatal(err)
	}
	s.close(5 * time.Second)
	if b, _ := os.ReadFile(starts); strings.Count(string(b), "run") != 3 {
		t.Errorf("runs after close: %q", b)
	}
}
