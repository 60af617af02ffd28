package slowlogin_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
	"github.com/hamaster/hamaster/testbed/slowlogin"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"0", 0, false},
		{"1s", time.Second, false},
		{"2500ms", 2500 * time.Millisecond, false},
		{"-1s", 0, true},
		{"2h", 0, true},
		{"1", 0, true},
		{"soon", 0, true},
	} {
		got, err := slowlogin.Parse("--login-delay", tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Parse(%q) = %s, %v; want %s, error %t", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "--login-delay") {
			t.Errorf("Parse(%q) error %q does not name the knob", tt.in, err)
		}
	}
}

// TestEverySessionIsDelayed: on the tests' sshd, every session (not only
// the connection's first) starts no sooner than the knob says, and runs
// the command asked for, with the shell's quoting intact.
func TestEverySessionIsDelayed(t *testing.T) {
	const delay = 400 * time.Millisecond
	t.Setenv(slowlogin.Env, delay.String())
	s := sshtest.Start(t, sshtest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard
	defer cancel()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := remote.Dial(ctx, remote.Config{Addr: s.Addr, User: s.User, KeyFile: s.ClientKeyFile, KnownHostsFile: s.KnownHostsFile, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		start := time.Now()
		out, errOut, err := c.Run(ctx, `printf '%s|' "a b" 'c"d'; echo $((1+2))`)
		took := time.Since(start)
		if err != nil || string(out) != `a b|c"d|3`+"\n" || len(errOut) != 0 {
			t.Fatalf("session %d: stdout %q, stderr %q (the setup's chatter is not the command's), %v", i, out, errOut, err)
		}
		if took < delay {
			t.Errorf("session %d started after %s, before the login delay of %s", i, took, delay)
		}
	}
	// The setup did talk; the client logged it apart.
	if n := strings.Count(string(logs.Bytes()), slowlogin.SetupChatter); n != 3 {
		t.Errorf("the client logged the setup's chatter %d times, want 3 (once a session):\n%s", n, logs.Bytes())
	}
}
