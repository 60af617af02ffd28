// Package errkind is the small set of error kinds every layer of hamaster
// uses: providers map their cloud's errors onto these, workflows decide on
// them, and the CLI turns them into exit codes. Callers test with errors.Is.
package errkind

import (
	"errors"
	"fmt"
)

// The kinds. Each is a sentinel to test with errors.Is; build errors of a
// kind with Errorf so the message stays the caller's own.
var (
	// NotFound: the thing asked for does not exist (HTTP 404, etcd member gone).
	NotFound = errors.New("not found")
	// AlreadyExists: a create found the thing already there (HTTP 409).
	AlreadyExists = errors.New("already exists")
	// FailedPrecondition: refused for safety or because the cluster is not
	// healthy enough; the CLI exits 3.
	FailedPrecondition = errors.New("failed precondition")
	// Unavailable: a transient failure that is safe to retry later (rate
	// limits, 5xx, etcd "unhealthy cluster" right after a member joins).
	Unavailable = errors.New("unavailable")
	// InvalidArgument: bad user input (a flag, a config field); the CLI exits 2.
	InvalidArgument = errors.New("invalid argument")
)

type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// Errorf formats like fmt.Errorf (so %w wraps) and marks the result as kind.
// The kind's own text is not added to the message.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// Mark marks an existing error as kind, keeping its message. nil stays nil.
func Mark(kind error, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

// Exit codes of the CLI.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitUsage   = 2
	ExitRefused = 3
)

// ExitCode maps an error to the CLI's exit code: nil → 0, InvalidArgument →
// 2, FailedPrecondition → 3, anything else → 1.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, InvalidArgument):
		return ExitUsage
	case errors.Is(err, FailedPrecondition):
		return ExitRefused
	default:
		return ExitFailed
	}
}
