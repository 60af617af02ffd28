// Command hamaster-node is what the local provider runs in place of cloud
// VMs and load balancers:
//
//	hamaster-node replica --env-file F   a control-plane replica (etcd + the apiserver
//	                                     stand-in, or kube-apiserver with CONTROL_PLANE=real)
//	hamaster-node lb --config F          the L4 load balancer in front of the replicas
//	hamaster-node kube-up-master ...     a master booted as kube-up's configure-helper.sh
//	                                     boots one, from its kube-env and kube-master-certs
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
	"strings"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/lbproxy"
	"github.com/hamaster/hamaster/dataplane/node"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/climain"
)

const usage = `usage:
  hamaster-node replica --env-file FILE [--log-level LEVEL]
  hamaster-node lb --config FILE [--log-level LEVEL]
  hamaster-node kube-up-master (--kube-env FILE --kube-master-certs FILE | --aws-user-data FILE) --disk DIR
      [--hostname NAME] [--status-file FILE] [--pid-file FILE] [--log-file FILE]
      [--resolve-timeout DURATION] [--download URL=FILE]... [--log-level LEVEL]
    boots a GCE kube-up master from its two metadata items as configure-helper.sh
    does: certificates under DIR/srv/kubernetes, etcd main (etcd-<hostname>, peers
    https://<hostname>:2380, clients https://127.0.0.1:2379) and events (:2381,
    http://127.0.0.1:4002) with data in DIR/var/etcd/data[-events], and the
    apiserver stand-in on :443. The hostname is ETCD_HOSTNAME, else --hostname,
    else the machine's short hostname; its address (etcd peers listen there) is
    resolved like gethostbyname. With --aws-user-data it boots a kube-up AWS master
    (cluster/aws/util.sh start-master) from its EC2 user data: gunzipped if gzip'ed,
    the kube_env.yaml heredoc as its kube-env (ETCD_APISERVER_* included).
`

func main() {
	// Keep SIGHUP from killing the process before or after Run handles it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
		}
	}()
	climain.Run(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Stderr) })
}

// run runs the subcommand in args and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errkind.ExitUsage
	}
	cmd, rest := args[0], args[1:]
	if cmd == "recover" {
		return runRecover(ctx, rest, stderr)
	}
	fs := flag.NewFlagSet("hamaster-node "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	var file string
	var ku kubeUpFlags
	switch cmd {
	case "kube-up-master":
		ku.register(fs)
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
	if cmd == "kube-up-master" {
		if err := ku.check(); err != nil {
			fmt.Fprintf(stderr, "hamaster-node %s: %v\n%s", cmd, err, usage)
			return errkind.ExitUsage
		}
	} else if file == "" {
		fmt.Fprintf(stderr, "hamaster-node %s: the config file flag is required\n%s", cmd, usage)
		return errkind.ExitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "hamaster-node: --log-level %q: want debug, info, warn or error\n", *level)
		return errkind.ExitUsage
	}
	logOut := stderr
	if ku.logFile != "" {
		f, err := os.OpenFile(ku.logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "hamaster-node %s: --log-file: %v\n", cmd, err)
			return errkind.ExitUsage
		}
		defer f.Close()
		logOut = f
	}
	logger := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: lvl})).With("cmd", cmd)

	var err error
	switch cmd {
	case "kube-up-master":
		err = runKubeUpMaster(ctx, ku, logger)
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

// kubeUpFlags are kube-up-master's flags.
type kubeUpFlags struct {
	kubeEnv, masterCerts, hostname, disk string
	awsUserData                          string
	statusFile, pidFile, logFile         string
	resolveTimeout                       time.Duration
	unsafeNoFsync                        bool
	downloads                            map[string]string
}

func (k *kubeUpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeEnv, "kube-env", "", "the instance's \"kube-env\" metadata item (required)")
	fs.StringVar(&k.masterCerts, "kube-master-certs", "", "the instance's \"kube-master-certs\" metadata item (required)")
	fs.StringVar(&k.awsUserData, "aws-user-data", "", "the instance's EC2 user data in kube-up's AWS format (instead of --kube-env and --kube-master-certs)")
	fs.StringVar(&k.hostname, "hostname", "", "the instance name (default: the machine's short hostname); kube-env ETCD_HOSTNAME wins")
	fs.StringVar(&k.disk, "disk", "", "the master PD's mount point, /mnt/disks/master-pd on GCE (required)")
	fs.StringVar(&k.statusFile, "status-file", "", "where to write the JSON status (nodeapi.Status)")
	fs.StringVar(&k.pidFile, "pid-file", "", "written with the pid at start, removed on a clean exit")
	fs.StringVar(&k.logFile, "log-file", "", "append logs here instead of stderr")
	fs.DurationVar(&k.resolveTimeout, "resolve-timeout", 300*time.Second, "how long to retry resolving the hostname (configure-helper.sh: 300s)")
	fs.BoolVar(&k.unsafeNoFsync, "etcd-unsafe-no-fsync", false, "disable etcd's fsync (tests only)")
	fs.Func("download", "`URL=FILE`: the VM downloads URL (kube-env SERVER_BINARY_TAR_URL, KUBE_MANIFESTS_TAR_URL) as FILE's content; repeatable; an unlisted URL cannot be downloaded", func(v string) error {
		u, f, ok := strings.Cut(v, "=")
		if !ok || u == "" || f == "" {
			return fmt.Errorf("want URL=FILE, got %q", v)
		}
		if k.downloads == nil {
			k.downloads = map[string]string{}
		}
		k.downloads[u] = f
		return nil
	})
}

func (k *kubeUpFlags) check() error {
	if k.awsUserData != "" {
		if k.kubeEnv != "" || k.masterCerts != "" {
			return fmt.Errorf("--aws-user-data excludes --kube-env and --kube-master-certs")
		}
		if k.disk == "" {
			return fmt.Errorf("--disk is required")
		}
		return nil
	}
	for _, f := range []struct{ name, v string }{{"--kube-env", k.kubeEnv}, {"--kube-master-certs", k.masterCerts}, {"--disk", k.disk}} {
		if f.v == "" {
			return fmt.Errorf("%s is required", f.name)
		}
	}
	return nil
}

func runKubeUpMaster(ctx context.Context, k kubeUpFlags, logger *slog.Logger) error {
	env, crt, err := readKubeUpInputs(k)
	if err != nil {
		return err
	}
	host := k.hostname
	if host == "" {
		// configure-helper.sh: $(hostname -s).
		if host, err = os.Hostname(); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
		host, _, _ = strings.Cut(host, ".")
	}
	logger.Info("starting kube-up master", "hostname", host, "disk", k.disk, "pid", os.Getpid())
	return node.RunKubeUpMaster(ctx, node.KubeUpOptions{
		KubeEnv: env, MasterCerts: crt, Hostname: host, Disk: k.disk,
		StatusFile: k.statusFile, PIDFile: k.pidFile, ResolveTimeout: k.resolveTimeout, EtcdUnsafeNoFsync: k.unsafeNoFsync,
		Downloads: k.downloads,
	}, logger)
}

// readKubeUpInputs reads the master's kube-env and kube-master-certs: the
// two GCE metadata items, or both out of an AWS master's user data.
func readKubeUpInputs(k kubeUpFlags) (string, string, error) {
	if k.awsUserData != "" {
		ud, err := os.ReadFile(k.awsUserData)
		if err != nil {
			return "", "", errkind.Errorf(errkind.InvalidArgument, "--aws-user-data: %w", err)
		}
		return node.KubeUpAWSUserData(ud)
	}
	env, err := os.ReadFile(k.kubeEnv)
	if err != nil {
		return "", "", errkind.Errorf(errkind.InvalidArgument, "--kube-env: %w", err)
	}
	crt, err := os.ReadFile(k.masterCerts)
	if err != nil {
		return "", "", errkind.Errorf(errkind.InvalidArgument, "--kube-master-certs: %w", err)
	}
	return string(env), string(crt), nil
}
