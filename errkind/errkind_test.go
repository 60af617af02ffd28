package errkind

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorfKeepsMessageAndKind(t *testing.T) {
	t.Parallel()
	err := Errorf(NotFound, "replica %s: %w", "m-1", io.EOF)
	if got, want := err.Error(), "replica m-1: EOF"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if !errors.Is(err, NotFound) || !errors.Is(err, io.EOF) {
		t.Fatalf("errors.Is lost the kind or the cause: %v", err)
	}
	if errors.Is(err, AlreadyExists) {
		t.Fatal("error of kind NotFound also matches AlreadyExists")
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("boom"), 1},
		{Errorf(InvalidArgument, "--provider: unknown %q", "x"), 2},
		{fmt.Errorf("outer: %w", Errorf(FailedPrecondition, "quorum")), 3},
		{Mark(Unavailable, errors.New("busy")), 1},
		{Mark(NotFound, nil), 0},
	}
	for _, c := range cases {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
