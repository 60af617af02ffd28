// Package slowlogin makes the test beds' sshds start every session as
// slowly as a real host does. On a real host each SSH session runs the
// login user's shell setup before its command: PAM modules, the motd,
// reverse DNS, profile scripts (a `pyenv init` in ~/.bashrc takes a second
// on its own). With connections reused, that cost is paid per command, not
// per connection; a test bed whose sessions start in milliseconds hides
// every deadline and every per-attempt poll that only a fast host meets.
//
// A heavy setup also talks: pyenv's rehash, run by `pyenv init` from
// ~/.bashrc, prints "rm: cannot remove …" on stderr when two logins race
// (as .ci/run's machine showed). So the test beds' setup prints a line on
// stderr too, before the command, in every session; a client must not
// take it for the command's own output. (Not on stdout: there it would
// break scp and sftp, as a real ~/.bashrc that prints on stdout does.)
//
// The delay is an sshd ForceCommand that sleeps, then runs the command the
// client asked for (SSH_ORIGINAL_COMMAND) with the user's shell as sshd
// would have, or a login shell when none was asked for. The shell keeps
// the session's process id and group (exec), as a remote.Client's
// cancellation needs.
package slowlogin

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Env is the knob: how long every session on a test bed's sshd takes to
// start, as a Go duration ("1s", "2500ms"; "0" for none). Unset: Default.
const Env = "HAMASTER_SSH_LOGIN_DELAY"

// Default is the delay when Env is unset: a login as slow as a host with a
// heavy shell setup, so that every test bed shows what such a host shows.
const Default = time.Second

// Max bounds the knob: a delay above it is a mistake, not a host.
const Max = time.Minute

// FromEnv is the delay Env asks for, Default when it is unset.
func FromEnv() (time.Duration, error) {
	v, ok := os.LookupEnv(Env)
	if !ok || v == "" {
		return Default, nil
	}
	return Parse(Env, v)
}

// Parse reads a delay given by what (a flag or variable name, for the
// error): a Go duration from 0 to Max.
func Parse(what, v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > Max {
		return 0, fmt.Errorf("%s=%q: want a duration from 0 to %s, such as 1s or 2500ms", what, v, Max)
	}
	return d, nil
}

// SetupChatter is the line every delayed session prints on stderr before
// its command, as a talkative shell setup does (no shell metacharacters).
const SetupChatter = "hamaster-testbed: the login shell setup prints this on stderr"

// SSHDConfig is the sshd_config line that delays every session by d
// (none for 0). It runs for every user and every session, commands and
// shells alike; subsystems (sftp) are commands too under a ForceCommand,
// so a test bed that uses one must not use this.
func SSHDConfig(d time.Duration) []string {
	if d <= 0 {
		return nil
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	// Run by the user's shell with -c; exec keeps its pid, the session's
	// process group leader.
	return []string{`ForceCommand echo ` + SetupChatter + ` >&2; sleep ` + secs + `; if [ -n "${SSH_ORIGINAL_COMMAND+set}" ]; then exec "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"; else exec "${SHELL:-/bin/sh}" -l; fi`}
}
