package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/syncbuf"
)

// stderrTailBytes bounds the stderr an ExitError quotes.
const stderrTailBytes = 1024

// ExitError is Run's error for a command that ran and failed: it exited
// with a non-zero status or was killed by a signal. Get it with errors.As.
type ExitError struct {
	Addr string // the master
	Cmd  string
	// Status is the exit status; for a command killed by a signal, 128 +
	// the signal's number, as a shell reports it.
	Status int
	Signal string // e.g. "KILL"; "" when the command exited
	// StderrTail is the end of the command's stderr (at most about 1 KiB,
	// starting at a line), trimmed.
	StderrTail string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("run %s on %s: %s", quoteCmd(e.Cmd), e.Addr, e.outcome())
}

// outcome is "exit status N" or "killed by signal S", then the stderr tail.
func (e *ExitError) outcome() string {
	how := fmt.Sprintf("exit status %d", e.Status)
	if e.Signal != "" {
		how = "killed by signal " + e.Signal
	}
	if e.StderrTail != "" {
		how += ": " + e.StderrTail
	}
	return how
}

// Run runs cmd on the master through the login shell of the user and
// returns its stdout and stderr. A command that exits non-zero (or dies of a
// signal) gives an *ExitError with the status and the tail of stderr, along
// with the output. When ctx ends first, Run closes the session and returns
// ctx's error at once with whatever output had arrived; in the background
// it kills the command's process group on the master (see below). A
// connection that has ended gives an errkind.Unavailable error.
//
// Killing a cancelled command: sshd's "signal" request is sent, but OpenSSH
// refuses it for root logins (they skip post-authentication privilege
// separation), and closing the session does not stop the command either.
// So Run has the login shell report its pid (the process group sshd made
// for the session) on a first stderr line, which Run removes, and on
// cancellation runs "kill -s KILL -- -<pgid>" in a second session.
//
// The login shell's own setup (a ~/.bashrc that runs `pyenv init`, a
// profile script that greets) may print before the command runs, on
// either stream. That is not the command's output: Run ends the setup
// with a marker line on stdout and on stderr and returns only what comes
// after it (the setup's output is logged at debug level). A session that
// never reaches the marker (the login shell failed) returns all it printed.
func (c *Client) Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error) {
	return c.runChecked(ctx, cmd, nil)
}

// runChecked runs a killable command; for a client with Config.Sudo it
// also checks sudo, at no cost while sudo works: the first command that
// succeeds proves it, and the first that fails before that runs
// CheckSudo, whose error (naming the user, the host and the fix) it
// returns in place of the command's. A command sudo refused did not run,
// so a login that cannot become root is refused before it changes
// anything, without a session of its own.
func (c *Client) runChecked(ctx context.Context, cmd string, stdin io.Reader) ([]byte, []byte, error) {
	stdout, stderr, err := c.run(ctx, cmd, stdin, true)
	if !c.sudo || c.sudoOK.Load() {
		return stdout, stderr, err
	}
	var exit *ExitError
	switch {
	case err == nil:
		c.sudoOK.Store(true)
	case errors.As(err, &exit):
		if cerr := c.CheckSudo(ctx); errors.Is(cerr, errkind.FailedPrecondition) {
			return stdout, stderr, cerr
		}
	}
	return stdout, stderr, err
}

// sudoWrap is cmd run as root by sudo: -n fails at once where sudo would
// ask for a password, and sh -c runs the whole command line (its pipes,
// redirections and variables) as root, not only its first word. Without a
// terminal sudo keeps the command in the session's process group, so a
// cancelled command is still killed by its group.
func sudoWrap(cmd string) string {
	return "sudo -n -- sh -c " + ShellQuote(cmd)
}

// CheckSudo makes sure that a Client with Config.Sudo can run commands as
// root without a password: `sudo -n true`, once. It returns nil for a
// client without Sudo, and an errkind.FailedPrecondition error naming the
// user, the host and the fix when sudo is missing or asks for a password.
func (c *Client) CheckSudo(ctx context.Context) error {
	if !c.sudo {
		return nil
	}
	_, _, err := c.run(ctx, "true", nil, false)
	if err == nil {
		c.sudoOK.Store(true)
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		return errkind.Errorf(errkind.FailedPrecondition,
			"ssh user %q on %s is not root and cannot run commands as root with `sudo -n` (%s): give it passwordless sudo (a sudoers line `%s ALL=(ALL:ALL) NOPASSWD: ALL`, in /etc/sudoers.d/) or log in as root",
			c.user, c.addr, exit.outcome(), c.user)
	}
	if err != nil {
		return fmt.Errorf("check sudo for %q on %s: %w", c.user, c.addr, err)
	}
	return nil
}

// killTimeout bounds the background kill of a cancelled command.
const killTimeout = 10 * time.Second

func (c *Client) run(ctx context.Context, cmd string, stdin io.Reader, killable bool) ([]byte, []byte, error) {
	if strings.TrimSpace(cmd) == "" {
		return nil, nil, errkind.Errorf(errkind.InvalidArgument, "run on %s: empty command", c.addr)
	}
	start := time.Now()
	sess, err := c.newSession(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: %w", quoteCmd(cmd), err)
	}
	defer sess.Close()
	defer func() {
		c.log.Debug("ssh session", "took", time.Since(start).Round(time.Millisecond), "cmd", firstLine(cmd, 100))
	}()
	var out, errOut syncbuf.Buffer // read early when ctx ends, as the session copies
	sess.Stdout = &out
	sess.Stderr = &errOut
	sess.Stdin = stdin
	wire := cmd
	if c.sudo {
		wire = sudoWrap(cmd)
	}
	// The marker line ends the login shell's setup on both streams; $PPID
	// of this sh is the login shell, the session's process group leader.
	// The quotes keep it from any shell but sh.
	token := newSetupToken()
	outF, pg := newSetupFilter(&out, token), newSetupFilter(&errOut, token)
	sess.Stdout, sess.Stderr = outF, pg
	wire = "sh -c 'echo " + pg.token + "$PPID; echo " + pg.token + "$PPID >&2'\n" + wire
	if err := sess.Start(wire); err != nil {
		if end := c.waitEnd(time.Second); end != nil {
			return nil, nil, fmt.Errorf("run %s: %w", quoteCmd(cmd), end)
		}
		return nil, nil, errkind.Errorf(errkind.Unavailable, "run %s on %s: start: %w", quoteCmd(cmd), c.addr, err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		if killable {
			c.killGroup(ctx, cmd, pg, done)
		}
		return out.Bytes(), errOut.Bytes(), fmt.Errorf("run %s on %s: %w", quoteCmd(cmd), c.addr, ctx.Err())
	}
	outF.flush()
	pg.flush()
	if so, se := outF.setupOutput(), pg.setupOutput(); so != "" || se != "" {
		c.log.Debug("the login shell's setup printed, left out of the command's output", "stdout", so, "stderr", se)
	}
	stdout, stderr := out.Bytes(), errOut.Bytes()
	var (
		exit    *ssh.ExitError
		missing *ssh.ExitMissingError
	)
	switch {
	case err == nil:
		return stdout, stderr, nil
	case errors.As(err, &exit):
		return stdout, stderr, &ExitError{
			Addr: c.addr, Cmd: cmd,
			Status: exit.ExitStatus(), Signal: exit.Signal(),
			StderrTail: tail(stderr, stderrTailBytes),
		}
	case errors.As(err, &missing):
		if end := c.waitEnd(time.Second); end != nil {
			return stdout, stderr, fmt.Errorf("run %s: %w", quoteCmd(cmd), end)
		}
		return stdout, stderr, errkind.Errorf(errkind.Unavailable, "run %s on %s: the session ended without an exit status", quoteCmd(cmd), c.addr)
	default:
		return stdout, stderr, fmt.Errorf("run %s on %s: %w", quoteCmd(cmd), c.addr, err)
	}
}

// killGroup kills, in the background, the process group of a command whose
// Run was cancelled: once the group's id has arrived (or the session has
// ended on its own, in which case there is nothing to do), it runs kill in
// a new session. It gives up after killTimeout or when the client is
// closed. Close waits for it.
func (c *Client) killGroup(ctx context.Context, cmd string, pg *setupFilter, done <-chan error) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	started := c.goTracked(func() {
		defer cancel()
		go func() {
			select {
			case <-c.closing:
				cancel()
			case <-kctx.Done():
			}
		}()
		select {
		case <-pg.known:
		case <-done:
			return // ended by the signal, or by itself
		case <-kctx.Done():
			c.log.Warn("cancelled command may still run on the master: its process group is unknown", "cmd", quoteCmd(cmd))
			return
		}
		_, _, err := c.run(kctx, "kill -s KILL -- -"+pg.pgid, nil, false)
		var exit *ExitError
		switch {
		case err == nil:
			c.log.Debug("killed cancelled command", "cmd", quoteCmd(cmd), "pgid", pg.pgid)
		case errors.As(err, &exit):
			// No such process: it ended meanwhile.
			c.log.Debug("cancelled command already gone", "cmd", quoteCmd(cmd), "pgid", pg.pgid)
		default:
			c.log.Warn("cancelled command may still run on the master", "cmd", quoteCmd(cmd), "pgid", pg.pgid, "err", err)
		}
	})
	if !started {
		cancel()
	}
}

// newSession opens a session channel, giving up when ctx ends.
func (c *Client) newSession(ctx context.Context) (*ssh.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.endErr(); err != nil {
		return nil, err
	}
	type result struct {
		sess *ssh.Session
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.ssh.NewSession()
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			if end := c.waitEnd(time.Second); end != nil {
				return nil, end
			}
			return nil, errkind.Errorf(errkind.Unavailable, "open ssh session on %s: %w", c.addr, r.err)
		}
		return r.sess, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.sess != nil {
				r.sess.Close()
			}
		}()
		return nil, fmt.Errorf("open ssh session on %s: %w", c.addr, ctx.Err())
	}
}

// Upload writes data to the absolute path on the master with the permission
// bits of mode, atomically: the data goes to a temporary file in the same
// directory (created with umask 077), which is chmod-ed and then renamed
// over path, so a reader sees the old file or the new one, never a part.
// It runs a small POSIX sh script (cat, chmod, mv) and needs no scp or sftp.
// The directory must exist; the file is owned by the SSH user. A path that
// is relative, ends in "/" or names a directory, or a mode with bits other
// than permissions, is refused.
func (c *Client) Upload(ctx context.Context, p string, data []byte, mode os.FileMode) error {
	switch {
	case p == "" || !path.IsAbs(p):
		return errkind.Errorf(errkind.InvalidArgument, "upload to %s: path %q is not absolute", c.addr, p)
	case strings.ContainsRune(p, 0):
		return errkind.Errorf(errkind.InvalidArgument, "upload to %s: path %q contains a NUL byte", c.addr, p)
	case strings.HasSuffix(p, "/"):
		return errkind.Errorf(errkind.InvalidArgument, "upload to %s: path %q names a directory", c.addr, p)
	case mode&^os.ModePerm != 0:
		return errkind.Errorf(errkind.InvalidArgument, "upload to %s:%s: mode %s has more than permission bits", c.addr, p, mode)
	}
	p = path.Clean(p)
	dir, base := path.Split(p)
	tmp := dir + "." + base + ".hamaster-" + rand.Text()[:12]
	script := fmt.Sprintf(`set -e
p=%s
d=%s
t=%s
if [ ! -d "$d" ]; then echo "directory $d does not exist" >&2; exit 1; fi
if [ -d "$p" ]; then echo "$p is a directory" >&2; exit 1; fi
umask 077
trap 'rm -f -- "$t"' EXIT
cat > "$t"
chmod %04o "$t"
mv -f -- "$t" "$p"
trap - EXIT`, ShellQuote(p), ShellQuote(path.Dir(p)), ShellQuote(tmp), uint32(mode.Perm()))
	_, _, err := c.runChecked(ctx, "sh -c "+ShellQuote(script), bytes.NewReader(data))
	var exit *ExitError
	switch {
	case errors.As(err, &exit):
		// Say what failed without quoting the script.
		return &wrapError{msg: fmt.Sprintf("upload %d bytes to %s:%s: %s", len(data), c.addr, p, exit.outcome()), err: err}
	case err != nil:
		return fmt.Errorf("upload %d bytes to %s:%s: %w", len(data), c.addr, p, err)
	}
	return nil
}

// wrapError is an error with its own message that wraps err.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

// ShellQuote quotes s as one word for a POSIX shell: in single quotes, each
// single quote inside written as quote, backslash, quote, quote (end the
// quoting, an escaped quote, quote again).
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// quoteCmd shortens a command for messages.
func quoteCmd(cmd string) string {
	const max = 80
	if len(cmd) > max {
		cmd = cmd[:max] + "…"
	}
	return fmt.Sprintf("%q", cmd)
}

// tail returns the end of b, at most about n bytes starting at a line,
// trimmed and valid UTF-8.
func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	cut := false
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
		cut = true
	}
	s := strings.ToValidUTF8(string(b), "�")
	if cut {
		s = "…" + s
	}
	return s
}

// firstLine is cmd's first line cut to at most n bytes, for a log line.
func firstLine(cmd string, n int) string {
	if i := strings.IndexByte(cmd, '\n'); i >= 0 {
		cmd = cmd[:i] + " …"
	}
	if len(cmd) > n {
		cmd = cmd[:n] + "…"
	}
	return cmd
}

// WriteFileScript is a POSIX sh command line that writes data to the
// absolute path (its directory made first) atomically, with the
// permission bits of mode: a temporary file beside it, renamed over it.
// The data travels in the command line itself, base64, so several files
// can be written in one session (one script, joined with " && "); keep
// them well under Linux's 128 KiB limit on one argument (MAX_ARG_STRLEN:
// a command run through sudo is one).
func WriteFileScript(path string, data []byte, mode os.FileMode) string {
	tmp := ShellQuote(path + ".hamaster-tmp")
	return fmt.Sprintf("mkdir -p %s && printf %%s %s | base64 -d > %s && chmod %o %s && mv -f %s %s",
		ShellQuote(path[:strings.LastIndex(path, "/")+1]), base64.StdEncoding.EncodeToString(data), tmp, mode.Perm(), tmp, tmp, ShellQuote(path))
}
