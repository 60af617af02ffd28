package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// removeMember is remove-replica --member-id: an orphan etcd member.
func removeMember(c *cli.Context, e *env, g *globals) error {
	if c.String("name") != "" {
		return usageErr("--member-id and --name exclude each other: --name removes a replica, --member-id an etcd member no replica owns")
	}
	id, err := workflows.ParseMemberID(c.String("member-id"))
	if err != nil {
		return err
	}
	return g.withDeps(c, e, func(_ providers.Provider, d *workflows.Deps) error {
		wf := workflows.RemoveMember(d, id, c.Bool("force"))
		return workflows.Execute(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e)})
	})
}

// addStatusJSON adds the recovery-related parts of status.
func addStatusJSON(out map[string]any, rep workflows.Report) {
	out["endpoint_healthy"] = rep.EndpointError == ""
	if rep.EndpointError != "" {
		out["endpoint_error"] = rep.EndpointError
	}
	orphans := rep.Orphans
	if orphans == nil {
		orphans = []workflows.Orphan{}
	}
	out["orphans"] = orphans
}

// printStatusProblems prints what makes the cluster unhealthy beyond its
// replicas, each with the command that fixes it.
func printStatusProblems(w io.Writer, rep workflows.Report) {
	if rep.EndpointError != "" {
		fmt.Fprintf(w, "\nENDPOINT NOT ANSWERING: %s\n", rep.EndpointError)
	}
	for _, c := range rep.Certificates {
		if c.Problem != "" {
			fmt.Fprintf(w, "\nCERTIFICATE of %s: %s — renew with:\n  hamaster --cluster %s rotate-certs --yes\n", c.Replica, c.Problem, rep.Cluster)
		}
	}
	for _, o := range rep.Orphans {
		kind := "voter"
		if o.Learner {
			kind = "learner"
		}
		fmt.Fprintf(w, "\nORPHAN etcd %s %s %s (peer %v) — no replica owns it; remove it with:\n  %s\n", kind, o.ID, o.Name, o.PeerURLs, o.Command)
	}
}

// keepSnapshotsFlag is --keep-snapshots of every changing command.
func keepSnapshotsFlag() cli.Flag {
	return &cli.IntFlag{Name: "keep-snapshots", Value: workflows.DefaultKeepSnapshots, EnvVars: []string{"HAMASTER_KEEP_SNAPSHOTS"}, Usage: "how many etcd snapshots to keep in <state-dir>/<cluster>/snapshots (older ones are deleted after each new one)"}
}

func recoverCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "rebuild a cluster that lost etcd quorum from one surviving replica or a snapshot",
		Description: `Disaster recovery when etcd has lost quorum (e.g. 2 of 3 masters dead) and
every other command fails at "take cluster lock". etcd is rebuilt as a
ONE-member cluster on --from (local replicas: every replica is stopped
first; kubeadm masters: --from's etcd static pod is stopped, then run
once with --force-new-cluster from its manifest, or its data directory
is replaced by the restore (after which the apiserver, controller-manager
and scheduler are restarted on it), and its manifest put back):

  --from R             from R's own data (etcd --force-new-cluster: same
                       cluster ID, every key R had; R's data is copied aside
                       first)
  --from R --snapshot F
                       from the snapshot file F (etcd snapshot restore: the
                       file's hash is verified first, new cluster ID; R's old
                       data is kept aside)

Then the other replicas are deleted (kubeadm masters: kubeadm reset -f on
each, its Node deleted; a metal host that does not answer is forgotten,
its files left on it: once it answers it lists as a master again, and
'hamaster remove-replica --name HOST --yes' resets and frees it), the
load balancer is demoted (the static IP goes to R) unless the masters
record it as the cluster's endpoint (kubeadm's controlPlaneEndpoint on the
VIP: it stays, on R alone), and the lock of the run that was cut off is
cleared. Grow the cluster back with add-replica. Refused while etcd still
has a quorum unless --force. 'hamaster snapshots' lists the snapshots.

Example:
  hamaster --cluster demo snapshots                                   # pick a snapshot, if restoring from one
  hamaster --cluster demo recover --from demo-master --yes            # after losing quorum; refused (exit 3) while etcd still has one
  hamaster --cluster demo recover --from demo-master --snapshot "$(ls -t $HAMASTER_STATE_DIR/demo/snapshots/*.db | head -1)" --yes   # the newest snapshot; also refused (exit 3) while etcd has a quorum`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "the surviving replica `NAME` (required)"},
			&cli.StringFlag{Name: "snapshot", Usage: "restore from this etcd snapshot `FILE` instead of --from's data"},
			&cli.BoolFlag{Name: "force", Usage: "recover although etcd still has a quorum (discards the other members)"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "bound of the wait until the rebuilt replica serves"},
		}, providerFlags(true)...),
		Action: func(c *cli.Context) error {
			if err := g.mutating(c, e); err != nil {
				return err
			}
			from := c.String("from")
			if from == "" {
				return usageErr("--from: required: the surviving replica to rebuild the cluster on (see 'hamaster status')")
			}
			if err := validReplicaName(from); err != nil {
				return usageErr("--from: %v", err)
			}
			if err := positiveDuration(c, "timeout"); err != nil {
				return err
			}
			snap := c.String("snapshot")
			if c.IsSet("snapshot") {
				st, err := os.Stat(snap)
				if err != nil || !st.Mode().IsRegular() {
					return usageErr("--snapshot: %s is not a readable file", snap)
				}
			}
			return g.withDeps(c, e, func(_ providers.Provider, d *workflows.Deps) error {
				wf := workflows.Recover(d, workflows.RecoverParams{From: from, Snapshot: snap, Force: c.Bool("force"), Timeout: c.Duration("timeout")})
				return workflows.ExecuteRecover(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e)})
			})
		},
	}
}

func snapshotsCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "snapshots",
		Usage: "list the cluster's etcd snapshots, newest first",
		Description: `Every changing command takes an etcd snapshot first; the newest
--keep-snapshots (default 10) are kept. 'hamaster recover --snapshot FILE'
restores one.

Example:
  hamaster --cluster demo snapshots --output json`,
		Action: func(c *cli.Context) error {
			ss, err := workflows.ListSnapshots(g.stateDir, g.cluster)
			if err != nil {
				return err
			}
			if g.json() {
				if ss == nil {
					ss = []workflows.SnapshotFile{}
				}
				return writeJSON(e.stdout, ss)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tSIZE\tPATH")
			for _, s := range ss {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", s.ModTime.UTC().Format(time.RFC3339), s.Size, s.Path)
			}
			return tw.Flush()
		},
	}
}

// parseDays parses a duration that may be given in days ("30d") as well
// as Go's units ("720h"); it must be positive.
func parseDays(flag, s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, usageErr("--%s: %q: want a positive number of days such as 30d, or a duration such as 720h", flag, s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usageErr("--%s: %q: want a positive number of days such as 30d, or a duration such as 720h", flag, s)
	}
	return d, nil
}

func rotateCertsCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "rotate-certs",
		Usage: "reissue apiserver certificates that miss a SAN of the endpoint or expire soon (kubeadm: kubeadm certs renew), one replica at a time",
		Description: `Every apiserver certificate must cover the static IP / LB, every DNS name of
the endpoint, the service IP (10.0.0.1), kubernetes.* and the replica.
One replica at a time, the etcd leader's last (leadership then moves
once), for each replica whose certificate does not, or expires within
--expiring-within: drained from the LB → etcd leadership moved away
inside --drain-grace → certificates reissued by the cluster CA →
recreated with them on the same disk → health gate (fail-fast; on
failure its last known-good template is restored and the command stops,
exit 1) → back in the LB. 'add-replica --dns-name' runs it by itself
when needed.

On a kubeadm cluster (--flavor kubeadm) the certificates are kubeadm's:
for each master with a certificate kubeadm renews that expires within
--expiring-within ('kubeadm certs check-expiration'): drained (the VIP
handed over first when it holds it) → etcd leadership moved away inside
the grace → a backup of its certificates, kubeconfigs and manifests → 'kubeadm certs
renew all' → kube-apiserver, kube-controller-manager and kube-scheduler
restarted one at a time on them (etcd reloads its own) → health gate (on
failure the backup is restored and the command stops, exit 1) → back in
the LB. CAs are not renewed (kubeadm renews none).

Example:
  hamaster --cluster demo rotate-certs --drain-grace 1s --yes
  hamaster --cluster demo rotate-certs --expiring-within 60d --drain-grace 1s --yes`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "expiring-within", Value: "30d", Usage: "also renew certificates expiring within this `DURATION` (30d, 720h)"},
			&cli.DurationFlag{Name: "drain-grace", Value: 10 * time.Second, Usage: "wait after draining a replica from the LB before touching it"},
			&cli.DurationFlag{Name: "health-timeout", Value: 5 * time.Minute, Usage: "how long a replica may take to be healthy again before it is rolled back"},
		}, providerFlags(true)...),
		Action: func(c *cli.Context) error {
			if err := g.mutating(c, e); err != nil {
				return err
			}
			within, err := parseDays("expiring-within", c.String("expiring-within"))
			if err != nil {
				return err
			}
			if err := drainDurations(c, "health-timeout"); err != nil {
				return err
			}
			return g.withDeps(c, e, func(p providers.Provider, d *workflows.Deps) error {
				rs, err := p.Instances().List(c.Context)
				if err != nil {
					return err
				}
				names := make([]string, 0, len(rs))
				for _, r := range rs {
					names = append(names, r.Name)
				}
				names = workflows.LeaderLast(c.Context, d, names)
				wf := workflows.RotateCerts(d, workflows.RotateParams{Within: within, DrainGrace: c.Duration("drain-grace"), HealthTimeout: c.Duration("health-timeout")}, names)
				return workflows.Execute(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e)})
			})
		},
	}
}

// rotateAfterDNS is run by add-replica --dns-name: the replicas that were
// there before got their certificates without the name.
func rotateAfterDNS(c *cli.Context, e *env, g *globals, d *workflows.Deps, dnsName string) error {
	names, err := workflows.CertsNeedingRotation(c.Context, d, dnsName, workflows.CertRenewWindow)
	if err != nil || len(names) == 0 {
		return err
	}
	names = workflows.LeaderLast(c.Context, d, names)
	fmt.Fprintf(e.stderr, "hamaster: certificates of %v do not cover %s: rotating them (rotate-certs)\n", names, dnsName)
	wf := workflows.RotateCerts(d, workflows.RotateParams{DrainGrace: c.Duration("drain-grace"), HealthTimeout: c.Duration("timeout")}, names)
	return workflows.Execute(c.Context, d, wf, workflows.Options{Confirm: func(string) error { return nil }})
}
