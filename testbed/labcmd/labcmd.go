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

	"github.com/hamaster/hamaster/internal/climain"
)

// Run is a command's body: it returns the process's exit code.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Main runs run with a context that ends at SIGINT or SIGTERM and exits
// with its code.
func Main(run Run) {
	climain.Run(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
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

// Start is what a command's run does first: parse its arguments with
// parse, then make its logger at the --log-level that level reads from
// them. When the command must stop there, it has said why on stderr as
// "name: err" (nothing more for --help, whose usage parse printed) and ok
// is false, with the exit code: 0 for --help, 2 for bad arguments.
func Start[C any](name string, args []string, stderr io.Writer, parse func([]string, io.Writer) (C, int, error), level func(C) string) (c C, logger *slog.Logger, code int, ok bool) {
	c, code, err := parse(args, stderr)
	if err != nil {
		if code != 0 {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return c, nil, code, false
	}
	logger, err = Logger(stderr, level(c))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return c, nil, 2, false
	}
	return c, logger, 0, true
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
