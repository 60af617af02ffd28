package procid

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

func TestGone(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("procid proves processes gone on Linux only")
	}
	me := Self()
	if me.Boot == "" || me.PIDNS == "" || me.Start == 0 || me.PID != os.Getpid() {
		t.Fatalf("Self: %+v", me)
	}
	ended := exec.Command("true")
	if err := ended.Run(); err != nil { // run and reaped: its PID is free
		t.Fatal(err)
	}
	// A child that exited but is not reaped yet: a zombie.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	zid := ID{Boot: me.Boot, PIDNS: me.PIDNS, PID: zombie.Process.Pid}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wait.Until(ctx, 5*time.Millisecond, "the child to exit", func() (bool, error) {
		start, state, err := stat("/proc", zid.PID)
		zid.Start = start
		return err == nil && state == "Z", nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   ID
		gone bool
	}{
		{"this process", me, false},
		{"its PID free", ID{Boot: me.Boot, PIDNS: me.PIDNS, PID: ended.Process.Pid, Start: me.Start}, true},
		{"its PID reused by another process", ID{Boot: me.Boot, PIDNS: me.PIDNS, PID: me.PID, Start: me.Start + 1}, true},
		{"a zombie", zid, true},
		{"another boot (another machine)", ID{Boot: "00000000-0000-0000-0000-000000000000", PIDNS: me.PIDNS, PID: ended.Process.Pid, Start: 1}, false},
		{"another PID namespace", ID{Boot: me.Boot, PIDNS: "pid:[1]", PID: ended.Process.Pid, Start: 1}, false},
		{"no boot recorded (an older holder)", ID{PID: ended.Process.Pid}, false},
		{"no start time recorded", ID{Boot: me.Boot, PIDNS: me.PIDNS, PID: ended.Process.Pid}, false},
	} {
		if got := Gone(tc.id); got != tc.gone {
			t.Errorf("%s: Gone(%+v) = %v, want %v", tc.name, tc.id, got, tc.gone)
		}
	}
}

// TestStatCommWithParentheses: a command name may hold spaces and
// parentheses; the fields after it are still found.
func TestStatCommWithParentheses(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	if err := os.MkdirAll(proc+"/42", 0o755); err != nil {
		t.Fatal(err)
	}
	line := "42 (a) (b c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10\n"
	if err := os.WriteFile(proc+"/42/stat", []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	start, state, err := stat(proc, 42)
	if err != nil || start != 123456 || state != "S" {
		t.Fatalf("stat: %d %q %v; want 123456 S", start, state, err)
	}
}
