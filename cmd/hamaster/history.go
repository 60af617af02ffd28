package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/workflows"
)

func historyCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "history",
		Usage: "show who changed the cluster, when, with what and which hamaster",
		Description: `Every add-replica, remove-replica and rolling-upgrade run that got past its
confirmation appends one JSON line to <state-dir>/<cluster>/history.jsonl
(run ID, command and parameters, user, host, hamaster version, start, end,
result, the steps done). The file is only appended to, never rewritten.
Read-only; needs no provider.

Example:
  hamaster --cluster demo history --output json`,
		Action: func(c *cli.Context) error {
			recs, err := workflows.ReadHistory(g.stateDir, g.cluster)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(e.stdout, map[string]any{"cluster": g.cluster, "runs": recs})
			}
			if len(recs) == 0 {
				fmt.Fprintf(e.stdout, "no runs recorded for cluster %s (%s)\n", g.cluster, workflows.HistoryFile(g.stateDir, g.cluster))
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STARTED\tDURATION\tWORKFLOW\tPARAMS\tRESULT\tSTEPS DONE\tUSER@HOST\tVERSION\tRUN ID")
			for _, r := range recs {
				result := r.Result
				if r.Error != "" {
					result += ": " + oneLine(r.Error, 60)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s@%s\t%s\t%s\n", r.Started.Format(time.RFC3339), r.Ended.Sub(r.Started).Round(100*time.Millisecond),
					r.Workflow, paramList(r.Params), result, len(r.StepsDone), r.User, r.Host, r.Version, r.RunID)
			}
			return tw.Flush()
		},
	}
}

func paramList(p map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if p[k] != "" {
			parts = append(parts, k+"="+p[k])
		}
	}
	return strings.Join(parts, " ")
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
