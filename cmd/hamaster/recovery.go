package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

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
	if err := g.checkProviderFlags(c); err != nil {
		return err
	}
	p, err := g.openProvider(c)
	if err != nil {
		return err
	}
	defer p.Close()
	d := g.deps(c, e, p)
	wf := workflows.RemoveMember(d, id, c.Bool("force"))
	return workflows.Execute(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e)})
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
	for _, o := range rep.Orphans {
		kind := "voter"
		if o.Learner {
			kind = "learner"
		}
		fmt.Fprintf(w, "\nORPHAN etcd %s %s %s (peer %v) — no replica owns it; remove it with:\n  %s\n", kind, o.ID, o.Name, o.PeerURLs, o.Command)
	}
}
