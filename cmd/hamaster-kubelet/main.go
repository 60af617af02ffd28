// Command hamaster-kubelet is the test bed's kubelet (package
// testbed/kubelet): it takes the real kubelet's flags as kubeadm's unit
// passes them,
//
//	hamaster-kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
//	    --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
//	    $KUBELET_KUBEADM_ARGS --hamaster-version=vX.Y.Z --hamaster-bin-dir=DIR
//
// (flags it has no use for are ignored), answers --version with
// "Kubernetes vX.Y.Z", and runs etcd static pods as
//
//	hamaster-kubelet etcd <the manifest's etcd flags>
//
// which is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain, v3.7).
// SIGTERM or SIGINT stops it and its pods. It logs JSON to stderr
// (--hamaster-log-level, default info). Exit codes: 0 clean stop, 1
// failure, 2 bad usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.etcd.io/etcd/server/v3/etcdmain"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/climain"
	"github.com/hamaster/hamaster/testbed/kubelet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == kubelet.EtcdSubcommand {
		// etcd handles its own signals and exits.
		etcdmain.Main(append([]string{"etcd"}, kubelet.EtcdArgs(os.Args[2:])...))
		return
	}
	climain.Run(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr) })
}

// run runs the kubelet with args and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	var rest []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--hamaster-log-level="); ok {
			if err := level.UnmarshalText([]byte(v)); err != nil {
				fmt.Fprintf(stderr, "hamaster-kubelet: --hamaster-log-level %q: want debug, info, warn or error\n", v)
				return errkind.ExitUsage
			}
			continue
		}
		rest = append(rest, a)
	}
	o, err := kubelet.ParseFlags(rest, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "hamaster-kubelet: %v\n", err)
		return errkind.ExitUsage
	}
	if o.ShowVersion {
		if o.Version == "" {
			fmt.Fprintf(stderr, "hamaster-kubelet: no version: set --hamaster-version or $%s\n", kubelet.EnvVersion)
			return errkind.ExitUsage
		}
		fmt.Fprintln(stdout, kubelet.VersionLine(o.Version))
		return errkind.ExitOK
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := kubelet.Run(ctx, o, logger); err != nil {
		logger.Error("exiting", "err", err)
		if errors.Is(err, errkind.InvalidArgument) {
			return errkind.ExitUsage
		}
		return errkind.ExitFailed
	}
	return errkind.ExitOK
}
