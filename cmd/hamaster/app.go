package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/hamaster/hamaster/flavors"
	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/errkind"
)

// env is the process environment as given to run (tests pass their own).
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	vars           map[string]string
	// args is the command line as given (program name excluded).
	args []string
}

func (e *env) get(k string) string { return e.vars[k] }

// globals are the flags every command shares, resolved with the precedence
// flag > HAMASTER_<NAME> environment variable > --config file > default.
type globals struct {
	cluster  string
	provider string
	flavor   string // --flavor as given ("": the recorded one, else the provider's finding)
	master   flavors.Flavor
	stateDir string
	output   string
	logLevel string
	logFmt   string // --log-format: text or json
	dryRun   bool
	yes      bool
	logger   *slog.Logger
	// sshAgent is $SSH_AUTH_SOCK of the env given to run.
	sshAgent string
}

func (g *globals) json() bool { return g.output == "json" }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, vars: map[string]string{}}
	if len(args) > 1 {
		e.args = args[1:]
	}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			e.vars[k] = v
		}
	}
	g := &globals{}
	app := newApp(e, g)
	err := app.RunContext(ctx, args)
	if err != nil {
		var exit cli.ExitCoder
		if errors.As(err, &exit) && exit.ExitCode() == 0 {
			return 0
		}
		if strings.HasPrefix(err.Error(), "Required flag") {
			err = errkind.Mark(errkind.InvalidArgument, err)
		}
		fmt.Fprintf(stderr, "hamaster: %v\n", err)
	}
	return errkind.ExitCode(err)
}

func newApp(e *env, g *globals) *cli.App {
	var notFound error
	app := &cli.App{
		Name:  "hamaster",
		Usage: "make a Kubernetes control plane highly available, and keep it that way",
		Description: `hamaster adds and removes control-plane replicas (etcd member as a learner,
VM cloned from an existing master, certificates, load balancer or DNS) and
does so safely: preflight checks, an etcd snapshot before every change,
a journal so that re-running a command after a crash resumes it, and a
cluster lock so two operators cannot change one cluster at once.

Exit codes: 0 ok, 1 failed, 2 bad usage or bad input, 3 refused for safety
or cluster unhealthy.

Every global flag may also follow the command name (hamaster status
--output json) and can also be set by an environment variable
HAMASTER_<NAME> or a key of the --config YAML file; flags beat the
environment, which beats the file.`,
		Reader:         e.stdin,
		Writer:         e.stdout,
		ErrWriter:      e.stderr,
		HideVersion:    true,
		ExitErrHandler: func(*cli.Context, error) {},
		Flags:          globalFlags(e),
		Before:         func(c *cli.Context) error { return g.before(c, e) },
		CommandNotFound: func(c *cli.Context, name string) {
			notFound = usageErr("unknown command %q; see 'hamaster --help'", name)
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return errkind.Mark(errkind.InvalidArgument, err)
		},
		Commands: []*cli.Command{
			etcdCommand(e, g),
		},
	}
	app.Commands = append(app.Commands, clusterCommands(e, g)...)
	app.Commands = append(app.Commands, endpointCommand(e, g))
	app.Commands = append(app.Commands, versionCommand(e, g), historyCommand(e, g), completionCommand(e, g), manCommand(e))
	// "hamaster ... --generate-bash-completion" lists candidates for the
	// scripts of "hamaster completion".
	app.EnableBashCompletion = true
	for _, c := range app.Commands {
		setUsageErr(c)
		acceptGlobals(c, e, g)
	}
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return usageErr("unknown command %q; see 'hamaster --help'", c.Args().First())
		}
		return cli.ShowAppHelp(c)
	}
	prev := app.After
	app.After = func(c *cli.Context) error {
		if notFound != nil {
			return notFound
		}
		if prev != nil {
			return prev(c)
		}
		return nil
	}
	for _, c := range app.Commands {
		if takesNoArgs(c.Name) {
			noPositionalArgs(c)
		}
	}
	return app
}

// setUsageErr makes flag errors of every subcommand exit 2.
func setUsageErr(c *cli.Command) {
	c.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return errkind.Mark(errkind.InvalidArgument, err)
	}
	for _, sub := range c.Subcommands {
		setUsageErr(sub)
	}
}

func usageErr(format string, args ...any) error {
	return errkind.Errorf(errkind.InvalidArgument, format, args...)
}

func defaultStateDir(e *env) string {
	if x := e.get("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "hamaster")
	}
	home := e.get("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "state", "hamaster")
}

func globalFlags(e *env) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", Value: "demo", EnvVars: []string{"HAMASTER_CLUSTER"}, Usage: "cluster `NAME` to act on"},
		&cli.StringFlag{Name: "provider", Value: "local", EnvVars: []string{"HAMASTER_PROVIDER"}, Usage: "where the masters run: local|gce|aws|metal (metal: your own hosts over SSH, listed in --metal-inventory, the endpoint a VIP)"},
		&cli.StringFlag{Name: "flavor", EnvVars: []string{"HAMASTER_FLAVOR"}, Usage: "what the masters are, apart from where they run: `hamaster|kubeadm|kubeup` (recorded with the cluster on its first change; default: the recorded one, else what the provider finds on its masters: kube-up's GCE metadata or AWS user data → kubeup, else hamaster)"},
		&cli.StringFlag{Name: "config", EnvVars: []string{"HAMASTER_CONFIG"}, Usage: "YAML `FILE` whose keys are flag names (cluster: prod, provider: local, ...)"},
		&cli.StringFlag{Name: "state-dir", Value: defaultStateDir(e), EnvVars: []string{"HAMASTER_STATE_DIR"}, Usage: "`DIR` for journals, snapshots, certificates and the local provider's replicas"},
		&cli.StringFlag{Name: "output", Value: "text", EnvVars: []string{"HAMASTER_OUTPUT"}, Usage: "text|json"},
		&cli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"HAMASTER_LOG_LEVEL"}, Usage: "debug|info|warn|error (logs go to stderr)"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"HAMASTER_LOG_FORMAT"}, Usage: "text|json (logs go to stderr, never to stdout)"},
		&cli.BoolFlag{Name: "dry-run", EnvVars: []string{"HAMASTER_DRY_RUN"}, Usage: "print the plan (every step and the calls it would make) and change nothing"},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, EnvVars: []string{"HAMASTER_YES"}, Usage: "do not ask for confirmation before changing the cluster"},
		&cli.BoolFlag{Name: "version", Usage: "print hamaster's version and exit (also: hamaster version)"},
	}
}

// load resolves globals: the config file fills what neither a flag nor the
// environment set, then every value is validated.
func (g *globals) load(c *cli.Context, e *env) error {
	if err := applyConfig(c, e, c.App.Flags, true); err != nil {
		return err
	}
	for _, n := range globalFlagNames(e) {
		g.assign(c, n)
	}
	return g.validate(e)
}

// validate checks every global value and builds the logger.
func (g *globals) validate(e *env) error {
	if err := validClusterName(g.cluster); err != nil {
		return err
	}
	if err := flavorregistry.Check(g.flavor); err != nil {
		return err
	}
	if !slices.Contains(knownProviders, g.provider) {
		return usageErr("--provider: unknown provider %q (valid: %s)", g.provider, strings.Join(knownProviders, ", "))
	}
	if g.output != "text" && g.output != "json" {
		return usageErr("--output: %q is not valid (valid: text, json)", g.output)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return usageErr("--log-level: %q is not valid (valid: debug, info, warn, error)", g.logLevel)
	}
	if g.stateDir == "" {
		return usageErr("--state-dir: must not be empty")
	}
	if g.logFmt != "text" && g.logFmt != "json" {
		return usageErr("--log-format: %q is not valid (valid: text, json)", g.logFmt)
	}
	g.logger = newLogger(e.stderr, level, g.logFmt)
	g.sshAgent = e.get("SSH_AUTH_SOCK")
	return nil
}

// validReplicaName: a DNS label (VM, disk and etcd member names).
func validReplicaName(name string) error {
	if name == "" || len(name) > 63 {
		return usageErr("--name: %q must be 1-63 characters", name)
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(name)-1) {
			return usageErr("--name: %q must be lower-case letters, digits and inner dashes (a DNS label)", name)
		}
	}
	return nil
}

// validClusterName: DNS-label-like, since it becomes part of VM, LB and
// record names in every cloud.
func validClusterName(name string) error {
	if name == "" || len(name) > 40 {
		return usageErr("--cluster: %q must be 1-40 characters", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(name)-1
		if !ok {
			return usageErr("--cluster: %q must be lower-case letters, digits and inner dashes (it becomes part of VM and LB names)", name)
		}
	}
	return nil
}
