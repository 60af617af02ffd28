// Package labcmd is what the test beds' commands (bin/gcefake,
// bin/metallab) share: a run until SIGINT or SIGTERM, a flag set that
// prints the command's usage, the exit codes of its parse (0 for --help,
// 2 for bad arguments) and its logger from --log-level.
package labcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Run is a command's body: it returns the process's exit code.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Main runs run with a context that ends at SIGINT or SIGTERM and exits
// with its code.
func Main(run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// FlagSet is command name's flag set: its errors and usage (the text
// usage, then the flags) go to stderr.
func FlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args, which take no positional arguments, and returns the
// exit code of an error: 0 for --help (flag.ErrHelp, the usage printed),
// else 2.
func Parse(fs *flag.FlagSet, args []string) (int, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, err
		}
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return 0, nil
}

// Logger is a text logger to w at level (debug, info, warn or error, as
// --log-level names it).
func Logger(w io.Writer, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}
