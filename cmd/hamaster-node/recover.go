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
  hamaster-node recover --snapshot DB --name NAME --peer-url URL --out DIR
                                                        the same restore into a new directory DIR, for
                                                        the member NAME at URL of a master elsewhere
The replica must be stopped. The etcd server lives in hamaster-node only,
so hamaster runs disaster recovery through it (the local provider on its
replicas, the kubeadm flavor for the data it uploads to a master).
`

// runRecover rewrites a stopped replica's etcd data into a one-member
// cluster, from its own data or from a snapshot.
func runRecover(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("hamaster-node recover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envFile := fs.String("env-file", "", "the replica's env file")
	snap := fs.String("snapshot", "", "etcd snapshot file to restore")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound of the force-new-cluster start")
	name := fs.String("name", "", "with --out: the member's name")
	peerURL := fs.String("peer-url", "", "with --out: the member's peer URL")
	out := fs.String("out", "", "restore --snapshot into this new directory instead of a replica's data")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(stderr, recoverUsage)
		return errkind.ExitUsage
	}
	if *out != "" {
		if *envFile != "" || *snap == "" || *name == "" || *peerURL == "" {
			fmt.Fprint(stderr, "hamaster-node recover --out: needs --snapshot, --name and --peer-url, and no --env-file\n"+recoverUsage)
			return errkind.ExitUsage
		}
		token := fmt.Sprintf("hamaster-restore-%d", time.Now().UnixNano())
		if err := node.RestoreSnapshotTo(*snap, *name, *peerURL, *out, token); err != nil {
			fmt.Fprintf(stderr, "hamaster-node recover: %v\n", err)
			return errkind.ExitFailed
		}
		fmt.Fprintf(stderr, "restored %s into %s: a new one-member cluster of %s at %s\n", *snap, *out, *name, *peerURL)
		return errkind.ExitOK
	}
	if *envFile == "" {
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
