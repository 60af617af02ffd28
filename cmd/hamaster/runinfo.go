package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/tfexternal"
	"github.com/hamaster/hamaster/workflows"
)

// runInfo fills what the cluster's history records about a run: the
// command line, the user, the host and hamaster's version.
func (g *globals) runInfo(e *env, d *workflows.Deps) {
	d.Args = e.args
	d.Version = buildInfo().Version
	d.User = e.get("USER")
	if u, err := user.Current(); err == nil {
		d.User = u.Username
	}
	d.Host, _ = os.Hostname()
}

// showPlan prints a dry run's plan as one JSON document in --output json
// (nil in text mode: the workflows print the text plan).
func (g *globals) showPlan(e *env) func(workflows.PlanDoc) error {
	if !g.json() {
		return nil
	}
	return func(doc workflows.PlanDoc) error { return writeJSON(e.stdout, doc) }
}

// nextReplicaName is add-replica's default name: the deterministic one
// "hamaster terraform" reports as next_replica_name (the first name of
// tfexternal.NextReplicaName's sequence no replica or etcd member uses), so
// a dry run shows the name the run will use. What cannot be read is left
// out (preflight then refuses the run anyway). A provider whose machines
// exist already (metal: the inventory's hosts) names the free one to
// take, in zone when given, or says why none is.
func nextReplicaName(ctx context.Context, d *workflows.Deps, zone string) (string, error) {
	if nc := d.ProviderCaps().NameChooser; nc != nil {
		return nc.NextReplicaName(ctx, zone)
	}
	taken := map[string]bool{}
	if rs, err := d.Provider.Instances().List(ctx); err == nil {
		for _, r := range rs {
			taken[r.Name] = true
		}
	} else if d.Logger != nil {
		d.Logger.Warn("next replica name: list replicas", "error", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if cli, err := d.Etcd(cctx); err == nil {
		if ms, err := cli.Members(cctx); err == nil {
			for _, m := range ms {
				if m.Name != "" {
					taken[m.Name] = true
					// kube-up's members are etcd-<hostname>, the hostname
					// the replica's name.
					if h, ok := strings.CutPrefix(m.Name, "etcd-"); ok {
						taken[h] = true
					}
				}
			}
		}
		cli.Close()
	} else if d.Logger != nil {
		d.Logger.Warn("next replica name: etcd members", "error", err)
	}
	if n := d.ProviderCaps().MasterNamer; n != nil {
		return tfexternal.NextReplicaNameFor(d.Cluster, n.MasterName(), taken), nil
	}
	return tfexternal.NextReplicaName(d.Cluster, taken), nil
}

// voterWarning says what fault tolerance an even number of etcd voters
// gives ("" for an odd number: nothing to warn about).
func voterWarning(voters int) string {
	if voters == 0 || voters%2 == 1 {
		return ""
	}
	q := etcdmember.Quorum(voters)
	return fmt.Sprintf("the cluster now has %d etcd voters: quorum is %d, so it tolerates %d failed replica(s), the same as %d voters; add or remove one replica for an odd count (%d voters tolerate %d)",
		voters, q, voters-q, voters-1, voters+1, voters+1-etcdmember.Quorum(voters+1))
}

// warnEvenVoters prints voterWarning for the cluster's current voters to
// stderr after a successful add or remove (a warning, not a refusal).
func warnEvenVoters(ctx context.Context, e *env, d *workflows.Deps, cmd string) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cli, err := d.Etcd(cctx)
	if err != nil {
		return
	}
	defer cli.Close()
	ms, err := cli.Members(cctx)
	if err != nil {
		return
	}
	voters := 0
	for _, m := range ms {
		if !m.Learner {
			voters++
		}
	}
	if w := voterWarning(voters); w != "" {
		fmt.Fprintf(e.stderr, "hamaster: %s: warning: %s\n", cmd, w)
	}
}

// result prints a command's outcome: the sentence for people in text mode,
// v as one JSON document in --output json (stdout carries JSON only).
func (g *globals) result(e *env, text string, v any) error {
	if g.json() {
		return writeJSON(e.stdout, v)
	}
	_, err := fmt.Fprintln(e.stdout, text)
	return err
}
