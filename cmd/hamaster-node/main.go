// Command hamaster-node is what the local provider runs in place of cloud
// VMs and load balancers:
//
//	hamaster-node replica --env-file F   a control-plane replica (etcd + apiserver stand-in)
//	hamaster-node lb --config F          the L4 load balancer in front of the replicas
//
// SIGTERM or SIGINT stops either gracefully; SIGHUP makes a replica re-read
// its static IP file and the load balancer its config. It logs JSON to
// stderr. Exit codes: 0 clean stop, 1 failure, 2 bad usage or config.
package main

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

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/dataplane/node"
	"github.com/hamaster/hamaster/errkind"
)

const usage = `usage:
  hamaster-node replica --env-file FILE [--log-level LEVEL]
  hamaster-node lb --config FILE [--log-level LEVEL]
`

func main() {
	// Keep SIGHUP from killing the process before or after Run handles it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the subcommand in args and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errkind.ExitUsage
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("hamaster-node "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	var file string
	switch cmd {
	case "replica":
		fs.StringVar(&file, "env-file", "", "the replica's env file (kube-env)")
	case "lb":
		fs.StringVar(&file, "config", "", "the load balancer's JSON config")
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return errkind.ExitOK
	default:
		fmt.Fprintf(stderr, "hamaster-node: unknown command %q\n%s", cmd, usage)
		return errkind.ExitUsage
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errkind.ExitOK
		}
		return errkind.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hamaster-node %s: unexpected arguments %q\n%s", cmd, fs.Args(), usage)
		return errkind.ExitUsage
	}
	if file == "" {
		fmt.Fprintf(stderr, "hamaster-node %s: the config file flag is required\n%s", cmd, usage)
		return errkind.ExitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "hamaster-node: --log-level %q: want debug, info, warn or error\n", *level)
		return errkind.ExitUsage
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("cmd", cmd)

	var err error
	switch cmd {
	case "replica":
		err = runReplica(ctx, file, logger)
	case "lb":
		err = runLB(ctx, file, logger)
	}
	if err != nil {
		logger.Error("exiting", "err", err)
		if errors.Is(err, errkind.InvalidArgument) {
			return errkind.ExitUsage
		}
		return errkind.ExitFailed
	}
	return errkind.ExitOK
}

func runReplica(ctx context.Context, envFile string, logger *slog.Logger) error {
	cfg, err := node.LoadEnvFile(envFile)
	if err != nil {
		return err
	}
	logger.Info("starting replica", "node", cfg.Name, "address", cfg.Address, "pid", os.Getpid())
	return node.Run(ctx, cfg, logger)
}

func runLB(ctx context.Context, configFile string, logger *slog.Logger) error {
	cfg, err := lbproxy.LoadConfig(configFile)
	if err != nil {
		return err
	}
	logger.Info("starting load balancer", "listen", cfg.Listen, "pid", os.Getpid())
	return lbproxy.Run(ctx, cfg, configFile, logger)
}
