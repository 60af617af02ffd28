package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hamaster/hamaster/dataplane/node"
	"github.com/hamaster/hamaster/errkind"
)

const recoverUsage = `usage:
  hamaster-node recover --env-file FILE                 etcd --force-new-cluster on the replica's data
  hamaster-node recover --env-file FILE --snapshot DB   etcd snapshot restore (hash verified, new cluster ID)
The replica must be stopped. The etcd server lives in hamaster-node only,
so the local provider runs disaster recovery through it.
`

// runRecover rewrites a stopped replica's etcd data into a one-member
// cluster, from its own data or from a snapshot.
func runRecover(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("hamaster-node recover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envFile := fs.String("env-file", "", "the replica's env file")
	snap := fs.String("snapshot", "", "etcd snapshot file to restore")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound of the force-new-cluster start")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *envFile == "" {
		fmt.Fprint(stderr, recoverUsage)
		return errkind.ExitUsage
	}
	cfg, err := node.LoadEnvFile(*envFile)
	if err != nil {
		fmt.Fprintf(stderr, "hamaster-node recover: %v\n", err)
		return errkind.ExitUsage
	}
	if *snap != "" {
		token := fmt.Sprintf("hamaster-restore-%d", time.Now().UnixNano())
		aside, err := node.RestoreSnapshot(cfg, *snap, token)
		if err != nil {
			fmt.Fprintf(stderr, "hamaster-node recover: %v\n", err)
			return errkind.ExitFailed
		}
		fmt.Fprintf(stderr, "restored %s into a new one-member cluster (previous data kept in %s)\n", *snap, aside)
		return errkind.ExitOK
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := node.ForceNewCluster(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "hamaster-node recover: %v\n", err)
		return errkind.ExitFailed
	}
	fmt.Fprintf(stderr, "%s's etcd data is now a one-member cluster\n", cfg.Name)
	return errkind.ExitOK
}
