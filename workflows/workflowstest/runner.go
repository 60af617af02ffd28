package workflowstest

import (
	"context"

	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// Runner runs the workflows on one cluster for an end-to-end test, as
// the CLI does: its Deps hold the test's lock holder and no progress
// events, and what the workflows print is collected (Output).
type Runner struct {
	Provider providers.Provider
	Cluster  string
	StateDir string

	out syncbuf.Buffer
}

// NewRunner is the Runner of cluster on p, its state in stateDir.
func NewRunner(p providers.Provider, cluster, stateDir string) *Runner {
	return &Runner{Provider: p, Cluster: cluster, StateDir: stateDir}
}

// Output is what the workflows have printed.
func (r *Runner) Output() string { return r.out.String() }

// Deps are the workflows' dependencies, with after as AfterStep, and
// the flavor the provider finds on its masters bound to it
// (registry.Open) as the CLI binds it; a provider no flavor can be bound
// to leaves Deps.Master nil, and the workflows refuse to start with
// workflows.ErrNoFlavor.
func (r *Runner) Deps(after func(string) error) *workflows.Deps {
	f, _ := registry.Open("", r.Provider, nil)
	return &workflows.Deps{Provider: r.Provider, Master: f, Cluster: r.Cluster, StateDir: r.StateDir, Sink: workflows.Discard{}, Out: &r.out, AfterStep: after, Holder: "test"}
}

// Add runs add-replica with p.
func (r *Runner) Add(ctx context.Context, p workflows.AddParams, after func(string) error) error {
	d := r.Deps(after)
	return workflows.Execute(ctx, d, workflows.AddReplica(d, p), workflows.Options{})
}

// Remove runs remove-replica with p as the CLI does: it supersedes an
// unfinished add of the same replica, and its lock's etcd connection
// avoids that replica.
func (r *Runner) Remove(ctx context.Context, p workflows.RemoveParams, after func(string) error) error {
	d := r.Deps(after)
	return workflows.Execute(ctx, d, workflows.RemoveReplica(d, p),
		workflows.Options{Supersede: workflows.SupersedeAdd(p.Name), LockExclude: []string{p.Name}})
}
