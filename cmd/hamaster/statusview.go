package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/workflows"
)

// viewRow is one master as the flavor's tool, etcd and the load
// balancer each see it: status's side-by-side table.
type viewRow struct {
	Replica   string `json:"replica"`
	Node      string `json:"node,omitempty"`
	NodeReady bool   `json:"node_ready"`
	Kubelet   string `json:"kubelet_version,omitempty"`
	// Etcd is the Node's etcd member: leader, voter, learner, none
	// ("" when etcd could not be read); " (unhealthy)" appended.
	Etcd string `json:"etcd"`
	// LB is the load balancer's view of the replica: healthy, draining,
	// down, "not a target", or "" without a load balancer.
	LB string `json:"lb,omitempty"`
	// NextExpiry is the certificate that expires first on the master.
	NextExpiry *flavors.CertificateExpiry `json:"next_expiry,omitempty"`
	StaticPods map[string]string          `json:"static_pods,omitempty"`
	Error      string                     `json:"error,omitempty"`
}

// viewRows sets the flavor's view beside etcd's members and the LB's
// targets, one row a master of the view.
func viewRows(rep workflows.Report) []viewRow {
	if rep.View == nil {
		return nil
	}
	rows := []viewRow{}
	for _, m := range rep.View.Masters {
		r := viewRow{Replica: m.Replica, Node: m.Node, NodeReady: m.NodeReady, Kubelet: m.KubeletVersion, StaticPods: m.StaticPods, Error: m.Error}
		if rep.MembersError == "" {
			r.Etcd = "none"
			if i := slices.IndexFunc(rep.Members, func(x etcdmember.Member) bool { return x.Name != "" && x.Name == m.Node }); i >= 0 {
				x := rep.Members[i]
				switch {
				case x.Leader:
					r.Etcd = "leader"
				case x.Learner:
					r.Etcd = "learner"
				default:
					r.Etcd = "voter"
				}
				if !x.Healthy && !x.Learner {
					r.Etcd += " (unhealthy)"
				}
			}
		}
		if rep.LB != nil {
			r.LB = "not a target"
			if i := slices.IndexFunc(rep.LB.Targets, func(t lb.TargetHealth) bool { return m.Replica != "" && t.Name == m.Replica }); i >= 0 {
				t := rep.LB.Targets[i]
				switch {
				case t.Draining:
					r.LB = "draining"
				case t.Healthy:
					r.LB = "healthy"
				default:
					r.LB = "down"
				}
			}
		}
		for _, c := range m.Certificates {
			if r.NextExpiry == nil || c.Expires.Before(r.NextExpiry.Expires) {
				r.NextExpiry = &c
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// addViewJSON adds the flavor's view to status's JSON: "flavor_view"
// (the view itself, the side-by-side rows, and "pinned": the consumers
// still on one master's own address, each with "fix", the command that
// moves it; "pinned_error" when they could not be read), or
// "flavor_view_error".
func addViewJSON(out map[string]any, rep workflows.Report) {
	if rep.ViewError != "" {
		out["flavor_view_error"] = rep.ViewError
	}
	if rep.View == nil {
		return
	}
	problems := rep.View.Problems
	if problems == nil {
		problems = []string{}
	}
	pinned := rep.View.Pinned
	if pinned == nil {
		pinned = []flavors.Pin{}
	}
	fv := map[string]any{
		"endpoint":     rep.View.Endpoint,
		"version":      rep.View.Version,
		"masters":      rep.View.Masters,
		"problems":     problems,
		"side_by_side": viewRows(rep),
		"pinned":       pinned,
	}
	if rep.View.PinnedError != "" {
		fv["pinned_error"] = rep.View.PinnedError
	}
	out["flavor_view"] = fv
}

// printView prints the flavor's view beside etcd's and the LB's.
func printView(w io.Writer, rep workflows.Report) {
	title := strings.ToUpper(rep.Flavor) + " VIEW"
	if rep.ViewError != "" {
		fmt.Fprintf(w, "\n%s\nunreadable: %s\n", title, rep.ViewError)
		return
	}
	if rep.View == nil {
		return
	}
	v := rep.View
	fmt.Fprintf(w, "\n%s (beside etcd's and the load balancer's)\nendpoint %s, version %s\n", title, orNone(v.Endpoint), orNone(v.Version))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tNODE\tREADY\tKUBELET\tETCD\tLB\tFIRST CERT EXPIRY\tSTATIC PODS (config.hash)")
	for _, r := range viewRows(rep) {
		ready := "no"
		if r.NodeReady {
			ready = "yes"
		}
		expiry := "-"
		if c := r.NextExpiry; c != nil {
			expiry = fmt.Sprintf("%s %s (%dd)", c.Name, c.Expires.UTC().Format("2006-01-02"), int(time.Until(c.Expires).Hours()/24))
		}
		if r.Error != "" {
			expiry = "? " + r.Error
		}
		var pods []string
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
			if h, ok := r.StaticPods[c]; ok {
				pods = append(pods, fmt.Sprintf("%s=%.8s", strings.TrimPrefix(c, "kube-"), h))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orNone(r.Replica), orNone(r.Node), ready, orNone(r.Kubelet), orNone(r.Etcd), orNone(r.LB), expiry, strings.Join(pods, " "))
	}
	tw.Flush()
}

// printPinned prints the consumers still pinned to one master's own
// address, then each command that moves them, once.
func printPinned(w io.Writer, rep workflows.Report) {
	v := rep.View
	if v == nil {
		return
	}
	if v.PinnedError == "" && len(v.Pinned) == 0 {
		return
	}
	fmt.Fprintf(w, "\nPINNED TO ONE MASTER (named where the endpoint %s should be: they reach no apiserver once that master is gone; remove-replica refuses it) OR TO A FORMER ENDPOINT\n", orNone(v.Endpoint))
	if v.PinnedError != "" {
		fmt.Fprintf(w, "unreadable: %s\n", v.PinnedError)
	}
	var fixes []string
	for _, p := range v.Pinned {
		fmt.Fprintf(w, "  %s\n", p)
		if !slices.Contains(fixes, p.Fix) {
			fixes = append(fixes, p.Fix)
		}
	}
	for _, f := range fixes {
		fmt.Fprintf(w, "repoint: %s\n", f)
	}
}

// printViewProblems prints the flavor's problems, each with its command.
func printViewProblems(w io.Writer, rep workflows.Report) {
	if rep.View == nil {
		return
	}
	for _, p := range rep.View.Problems {
		fmt.Fprintf(w, "\n%s: %s\n", strings.ToUpper(rep.Flavor), p)
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
