package remote_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// sq quotes s for the remote shell.
func sq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func TestRun(t *testing.T) {
	t.Parallel()
	withSudo(t, testRun)
}

func testRun(t *testing.T, s *sshtest.Server, c *remote.Client) {
	tests := []struct {
		name       string
		cmd        string
		wantStdout string
		wantStderr string
		// wantExit: the error is an *ExitError with this status (and
		// wantSignal); nil error when both are zero.
		wantExit   int
		wantSignal string
		// wantTail: the ExitError's StderrTail and message hold it.
		wantTail string
	}{
		{name: "stdout and stderr", cmd: "echo out; echo err >&2", wantStdout: "out\n", wantStderr: "err\n"},
		{name: "no stdin", cmd: "cat; echo done", wantStdout: "done\n"},
		{name: "quoting", cmd: "printf '%s|' " + sq("it's") + ` "a b" \$HOME`, wantStdout: "it's|a b|$HOME|"},
		{
			name: "non-zero exit", cmd: "echo partial; echo boom >&2; exit 3",
			wantStdout: "partial\n", wantStderr: "boom\n", wantExit: 3, wantTail: "boom",
		},
		{name: "killed by a signal", cmd: "kill -KILL $$", wantExit: 128 + 9, wantSignal: "KILL"},
		{
			name: "long stderr", cmd: "seq 1 3000 >&2; exit 1",
			wantStderr: seq(3000), wantExit: 1, wantTail: "2999\n3000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			stdout, stderr, err := c.Run(ctx, tt.cmd)
			if string(stdout) != tt.wantStdout || string(stderr) != tt.wantStderr {
				t.Errorf("Run(%q) = stdout %q, stderr %.40q, want %q, %.40q", tt.cmd, stdout, stderr, tt.wantStdout, tt.wantStderr)
			}
			if tt.wantExit == 0 && tt.wantSignal == "" {
				if err != nil {
					t.Errorf("Run(%q): %v", tt.cmd, err)
				}
				return
			}
			var exit *remote.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("Run(%q) error %v, want an *ExitError", tt.cmd, err)
			}
			if exit.Status != tt.wantExit || exit.Signal != tt.wantSignal {
				t.Errorf("exit status %d signal %q, want %d %q", exit.Status, exit.Signal, tt.wantExit, tt.wantSignal)
			}
			want := "exit status " + strconv.Itoa(tt.wantExit)
			if tt.wantSignal != "" {
				want = "killed by signal " + tt.wantSignal
			}
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), s.Addr) {
				t.Errorf("error %q does not say %q and name %s", err, want, s.Addr)
			}
			if !strings.HasSuffix(exit.StderrTail, tt.wantTail) || !strings.Contains(err.Error(), tt.wantTail) {
				t.Errorf("stderr tail %q (error %q) does not end with %q", exit.StderrTail, err, tt.wantTail)
			}
			if len(exit.StderrTail) > 1100 {
				t.Errorf("stderr tail is %d bytes long", len(exit.StderrTail))
			}
		})
	}
}

// seq is the output of seq 1 n.
func seq(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	return b.String()
}

// TestRunCancel cancels a long command once it is known to run: Run must
// return at once with ctx's error, and the remote command must die.
// withSudo runs test on a client of an sshd of its own, once as the
// login user and once through sudo (remote.Config.Sudo, as for a
// non-root login; here the login is the test's user, root on CI, whom
// sudo lets in without a password).
func withSudo(t *testing.T, test func(t *testing.T, s *sshtest.Server, c *remote.Client)) {
	for _, sudo := range []bool{false, true} {
		t.Run(map[bool]string{false: "login user", true: "sudo"}[sudo], func(t *testing.T) {
			t.Parallel()
			s := sshtest.Start(t, sshtest.Options{})
			cfg := config(s)
			cfg.Sudo = sudo
			test(t, s, dial(t.Context(), t, cfg))
		})
	}
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	withSudo(t, testRunCancel)
}

// testRunCancel: a cancelled Run returns at once and its remote command
// (its whole process group, through sudo too) is killed.
func testRunCancel(t *testing.T, _ *sshtest.Server, c *remote.Client) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := c.CheckSudo(ctx); err != nil {
		t.Fatalf("CheckSudo: %v", err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")

	runCtx, cancelRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Run(runCtx, "echo $$ > "+sq(pidFile)+".tmp && mv "+sq(pidFile)+".tmp "+sq(pidFile)+" && exec sleep 30")
		done <- err
	}()
	// Wait on the remote side until the command has written its pid.
	if _, _, err := c.Run(ctx, "while [ ! -s "+sq(pidFile)+" ]; do sleep 0.01; done"); err != nil {
		t.Fatalf("waiting for the command to start: %v", err)
	}
	cancelled := time.Now()
	cancelRun()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Run did not return after its context was cancelled")
	}
	// Run returns at once with ctx's error (below); the time is only a
	// hang guard: milliseconds are expected, and the remote command
	// sleeps 30 s.
	if took := time.Since(cancelled); took > 5*time.Second {
		t.Errorf("hang guard: Run returned only %s after the cancel (expected at once, in milliseconds)", took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run error %v, want context.Canceled", err)
	}
	// The remote sleep is gone: tail --pid returns when it exits.
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Run(ctx, "tail --pid="+strings.TrimSpace(string(pid))+" -s 0.05 -f /dev/null"); err != nil {
		t.Errorf("waiting for the remote command to die: %v", err)
	}
	// And the client still works.
	if out, _, err := c.Run(ctx, "echo ok"); err != nil || string(out) != "ok\n" {
		t.Errorf("Run after a cancel: %q, %v", out, err)
	}
}

func TestUpload(t *testing.T) {
	t.Parallel()
	withSudo(t, testUpload)
}

func testUpload(t *testing.T, _ *sshtest.Server, c *remote.Client) {
	allBytes := make([]byte, 256*64)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	tests := []struct {
		name     string
		file     string // relative to the test's directory unless absolute
		existing []byte // written first with mode 0600
		data     []byte
		mode     os.FileMode
		wantErr  string // "" for success
		wantKind error
	}{
		{name: "new file", file: "a.conf", data: []byte("hello\n"), mode: 0o600},
		{name: "replace a file", file: "b.conf", existing: []byte("old, longer content\n"), data: []byte("new\n"), mode: 0o644},
		{name: "binary", file: "bin", data: allBytes, mode: 0o755},
		{name: "empty", file: "empty", data: nil, mode: 0o400},
		{name: "hostile name", file: "it's \"a\" $(touch pwned) `touch pwned2` file;\nx", data: []byte("x"), mode: 0o640},
		{name: "relative path", file: "/", data: []byte("x"), mode: 0o600, wantErr: "not absolute", wantKind: errkind.InvalidArgument},
		{name: "directory", file: "dir", data: []byte("x"), mode: 0o600, wantErr: "is a directory"},
		{name: "missing directory", file: "nope/f", data: []byte("x"), mode: 0o600, wantErr: "does not exist"},
		{name: "setuid mode", file: "suid", data: []byte("x"), mode: 0o755 | os.ModeSetuid, wantErr: "permission bits", wantKind: errkind.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tt.file)
			if tt.name == "relative path" {
				path = "relative/file"
			}
			if tt.existing != nil {
				if err := os.WriteFile(path, tt.existing, 0o600); err != nil {
					t.Fatal(err)
				}
			}

			err := c.Upload(ctx, path, tt.data, tt.mode)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Upload: %v, want an error saying %q", err, tt.wantErr)
				}
				if tt.wantKind != nil && !errors.Is(err, tt.wantKind) {
					t.Errorf("Upload: %v, want kind %v", err, tt.wantKind)
				}
				return
			}
			if err != nil {
				t.Fatalf("Upload: %v", err)
			}
			// Read it back over SSH.
			got, _, err := c.Run(ctx, "cat -- "+sq(path))
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Errorf("read back %d bytes (%v), want %d", len(got), err, len(tt.data))
			}
			perm, _, err := c.Run(ctx, "stat -c %a -- "+sq(path))
			if want := strconv.FormatUint(uint64(tt.mode.Perm()), 8) + "\n"; err != nil || string(perm) != want {
				t.Errorf("mode %q (%v), want %q", perm, err, want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if len(names) != 2 { // the file and "dir": no temporary file, nothing pwned
				t.Errorf("directory holds %q, want only the file and dir", names)
			}
		})
	}
}

func TestUploadCancelled(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	c := dial(t.Context(), t, config(s))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	path := filepath.Join(t.TempDir(), "f")
	if err := c.Upload(ctx, path, []byte("x"), 0o600); !errors.Is(err, context.Canceled) {
		t.Errorf("Upload with a cancelled context: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file exists after a cancelled upload: %v", err)
	}
}

// TestWriteFileScript runs the scripts of two files joined into one, as
// one session does, in a real sh: each file's bytes and mode as given,
// its directory made, an old file replaced, no temporary file left.
func TestWriteFileScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{filepath.Join(dir, "new", "sub", "a.conf"), []byte("it's \"quoted\" $HOME `x`\n\x00\xff\n"), 0o640},
		{filepath.Join(dir, "b.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755},
	}
	if err := os.WriteFile(files[1].path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, f := range files {
		parts = append(parts, remote.WriteFileScript(f.path, f.data, f.mode))
	}
	if out, err := exec.CommandContext(t.Context(), "sh", "-c", strings.Join(parts, " &&\n")).CombinedOutput(); err != nil {
		t.Fatalf("sh: %v: %s", err, out)
	}
	for _, f := range files {
		got, err := os.ReadFile(f.path)
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("%s = %q, %v; want %q", f.path, got, err, f.data)
		}
		if st, err := os.Stat(f.path); err != nil || st.Mode().Perm() != f.mode {
			t.Errorf("%s mode = %v, %v; want %v", f.path, st.Mode().Perm(), err, f.mode)
		}
		if _, err := os.Stat(f.path + ".hamaster-tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s's temporary file left: %v", f.path, err)
		}
	}
}

// TestRunLeavesOutTheShellSetup: what the login shell's setup prints before
// the command (a greeting on stdout without a newline, pyenv's complaints
// on stderr) is not the command's output; a setup that ends the session
// before the command is shown whole.
func TestRunLeavesOutTheShellSetup(t *testing.T) {
	t.Parallel()
	const chatty = `printf 'Welcome to host-1!'; echo "rm: cannot remove '/root/.pyenv/shims/tmp'" >&2; `
	tests := []struct {
		name, setup, cmd       string
		wantStdout, wantStderr string
		wantExit               int
	}{
		{name: "output", setup: chatty, cmd: "echo out; echo err >&2", wantStdout: "out\n", wantStderr: "err\n"},
		{name: "failure", setup: chatty, cmd: "echo boom >&2; exit 4", wantStderr: "boom\n", wantExit: 4},
		{name: "a setup that refuses the login", setup: `echo 'This account is currently not available.' >&2; exit 1; `,
			cmd: "echo never", wantStderr: "This account is currently not available.\n", wantExit: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The first ForceCommand wins over slowlogin's.
			s := sshtest.Start(t, sshtest.Options{Config: []string{
				"ForceCommand " + tt.setup + `exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"`,
			}})
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			stdout, stderr, err := dial(ctx, t, config(s)).Run(ctx, tt.cmd)
			if string(stdout) != tt.wantStdout || string(stderr) != tt.wantStderr {
				t.Errorf("Run(%q) = stdout %q, stderr %q, want %q, %q", tt.cmd, stdout, stderr, tt.wantStdout, tt.wantStderr)
			}
			var exit *remote.ExitError
			switch {
			case tt.wantExit == 0 && err != nil:
				t.Errorf("Run(%q): %v", tt.cmd, err)
			case tt.wantExit != 0 && (!errors.As(err, &exit) || exit.Status != tt.wantExit || exit.StderrTail != strings.TrimSpace(tt.wantStderr)):
				t.Errorf("Run(%q) error %v, want exit status %d with stderr %q", tt.cmd, err, tt.wantExit, tt.wantStderr)
			}
		})
	}
}
