package workflowstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/workflows"
)

// SeedEnv selects which pairs of a crash-resume matrix run: "all" for the
// whole matrix, a number for the subset that seed picks. Unset, the seed
// is the commit's number on its branch (git rev-list --count HEAD), so
// successive commits take the shards in turn.
const SeedEnv = "HAMASTER_CRASH_SEED"

// Shards is how many shards the pairs outside a matrix's Always set are
// cut into; each run takes one, so every Shards successive commits cover
// the whole matrix.
const Shards = 3

// Pair is one cycle of a crash-resume matrix: add-replica killed right
// after step Add and resumed, then remove-replica (of the replica just
// added, made the etcd leader first) killed right after step Remove and
// resumed.
type Pair struct{ Add, Remove string }

func (p Pair) String() string { return p.Add + "/" + p.Remove }

// CrashMatrix is a provider's crash-resume matrix: every cycle starts and
// ends at one master (Master), grows it to two with a crashed first add
// (the one that promotes the static IP to the load balancer) and shrinks
// it back with a crashed removal of the etcd leader's replica (which
// demotes the load balancer again), asserting after each resume that the
// cluster converged with nothing orphaned.
type CrashMatrix struct {
	// Master is the cluster's first master.
	Master string
	// Deps returns the workflows' dependencies (AfterStep unset): the step
	// lists and the etcd client come from it.
	Deps func() *workflows.Deps
	// Add and Remove run add-replica and remove-replica of name with after
	// as Deps.AfterStep; Add with name "" resumes the journaled run.
	Add, Remove func(ctx context.Context, name string, after func(string) error) error
	// Converged fails the test unless exactly want are the cluster's
	// replicas (and members, targets, records...) and nothing leaked.
	Converged func(ctx context.Context, want ...string)
	// Always are the pairs every run crashes: the steps that matter most
	// on this provider. nil: every pair always runs.
	Always []Pair
	// HalfAdded are add steps after which the crashed add is not resumed
	// but undone by remove-replica; they run every time.
	HalfAdded []string
}

// Pairs is the whole matrix: every add step paired with a remove step,
// in order, the shorter list cycled, so that every step of both is
// crashed once.
func (m CrashMatrix) Pairs() []Pair {
	d := m.Deps()
	add := StepNames(workflows.AddReplica(d, workflows.AddParams{}))
	rm := StepNames(workflows.RemoveReplica(d, workflows.RemoveParams{}))
	pairs := make([]Pair, 0, max(len(add), len(rm)))
	for i := range max(len(add), len(rm)) {
		pairs = append(pairs, Pair{add[i%len(add)], rm[i%len(rm)]})
	}
	return pairs
}

// Run crashes and resumes the selected pairs (see Select), then the
// half-added replicas.
func (m CrashMatrix) Run(ctx context.Context, t *testing.T) {
	t.Helper()
	all := m.Pairs()
	for _, p := range m.Always {
		if !slices.Contains(all, p) {
			t.Fatalf("always-run pair %s is not in the matrix %v", p, all)
		}
	}
	pairs := all
	if m.Always != nil {
		pairs = Select(t, all, m.Always)
	} else {
		t.Logf("crash matrix: all %d pairs, every run", len(all))
	}
	master, err := m.masterMember(ctx)
	if err != nil {
		t.Fatalf("before the matrix: %v", err)
	}
	for i, p := range pairs {
		name := fmt.Sprintf("crash-master-%03x", i)
		if err := m.Add(ctx, name, CrashAfter(p.Add)); !errors.Is(err, ErrCrash) {
			t.Fatalf("add %s crashing after %s: %v", name, p.Add, err)
		}
		// The re-run does not repeat the name: it comes from the journal.
		if err := m.Add(ctx, "", nil); err != nil {
			t.Fatalf("resume add after crash at %s: %v", p.Add, err)
		}
		m.Converged(ctx, m.Master, name)
		if err := m.moveLeaderFrom(ctx, master); err != nil {
			t.Fatalf("make %s the etcd leader: %v", name, err)
		}
		if err := m.Remove(ctx, name, CrashAfter(p.Remove)); !errors.Is(err, ErrCrash) {
			t.Fatalf("remove %s (the leader) crashing after %s: %v", name, p.Remove, err)
		}
		if err := m.Remove(ctx, name, nil); err != nil {
			t.Fatalf("resume remove after crash at %s: %v", p.Remove, err)
		}
		m.Converged(ctx, m.Master)
		t.Logf("crash after add step %-24s and the leader's remove step %-24s: converged", p.Add, p.Remove)
	}
	// A crash mid-add, then removing the half-added replica instead.
	for i, s := range m.HalfAdded {
		name := fmt.Sprintf("crash-master-h%02x", i)
		if err := m.Add(ctx, name, CrashAfter(s)); !errors.Is(err, ErrCrash) {
			t.Fatalf("add %s crashing after %s: %v", name, s, err)
		}
		if err := m.Remove(ctx, name, nil); err != nil {
			t.Fatalf("remove half-added %s (crashed after %s): %v", name, s, err)
		}
		m.Converged(ctx, m.Master)
		t.Logf("half-added replica (crash after %s) removed: converged", s)
	}
}

// masterMember is the ID of the one etcd member a cycle starts from.
func (m CrashMatrix) masterMember(ctx context.Context) (uint64, error) {
	cli, err := m.Deps().Etcd(ctx)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ms, err := cli.Members(ctx)
	if err != nil {
		return 0, err
	}
	if len(ms) != 1 {
		return 0, fmt.Errorf("want one etcd member (%s's), have %d", m.Master, len(ms))
	}
	return ms[0].ID, nil
}

// moveLeaderFrom moves etcd leadership away from the master's member, to
// the replica just added, so that the removal that follows is a
// leader's: its move-etcd-leader step has something to do.
func (m CrashMatrix) moveLeaderFrom(ctx context.Context, master uint64) error {
	cli, err := m.Deps().Etcd(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.MoveLeader(ctx, master)
	return err
}

// CloudCrashMatrix is a cloud provider's matrix: the pairs that change
// the cloud (CloudPairs) every run, the rest a shard at a time, and a
// crash right after create-vm undone by remove-replica.
func CloudCrashMatrix(master string, deps func() *workflows.Deps, add, remove func(ctx context.Context, name string, after func(string) error) error, converged func(ctx context.Context, want ...string)) CrashMatrix {
	m := CrashMatrix{Master: master, Deps: deps, Add: add, Remove: remove, Converged: converged, HalfAdded: []string{workflows.StepCreateVM}}
	m.Always = CloudPairs(m.Pairs())
	return m
}

// CloudPairs are the pairs of all with a step that changes a cloud's
// resources (an address, a VM, the load balancer, a DNS record) or takes
// the leader's member out: what a cloud provider's matrix crashes every
// run. The rest are hamaster's own steps, which the local provider's
// matrix crashes every run.
func CloudPairs(all []Pair) []Pair {
	cloud := []string{
		workflows.StepReserveAddress, workflows.StepCreateVM, workflows.StepPromoteLB, workflows.StepAddToLB, workflows.StepDNS,
		workflows.StepRemoveFromLB, workflows.StepStopReplica, workflows.StepRemoveMember, workflows.StepDeleteVM, workflows.StepDemote,
	}
	var out []Pair
	for _, p := range all {
		if slices.Contains(cloud, p.Add) || slices.Contains(cloud, p.Remove) {
			out = append(out, p)
		}
	}
	return out
}

// Select returns the items of all (a matrix's pairs, a chain's steps)
// this run crashes: those in always, and one shard of the rest (every
// Shards-th item from the seed's), in all's order. The seed comes from
// SeedEnv or the commit (see SeedEnv); it is logged with the commands
// that rerun exactly this subset and the whole matrix.
func Select[T comparable](t testing.TB, all, always []T) []T {
	t.Helper()
	return SelectTagged(t, "fidelity", all, always)
}

// SelectTagged is Select for a test built with the build tags tags (what
// the rerun commands it logs say).
func SelectTagged[T comparable](t testing.TB, tags string, all, always []T) []T {
	t.Helper()
	rerun := func(seed string) string {
		return fmt.Sprintf("%s=%s go test -tags %s -count=1 -run '^%s$' ./%s", SeedEnv, seed, tags, t.Name(), packageDir())
	}
	v := os.Getenv(SeedEnv)
	var seed int
	switch {
	case v == "all":
		t.Logf("crash matrix: all %d (%s=all); rerun: %s", len(all), SeedEnv, rerun("all"))
		return all
	case v != "":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want \"all\" or a seed (a whole number ≥ 0)", SeedEnv, v)
		}
		seed = n
	default:
		seed = commitNumber()
	}
	var pick []T
	rest := 0
	for _, x := range all {
		if slices.Contains(always, x) {
			pick = append(pick, x)
			continue
		}
		if rest%Shards == seed%Shards {
			pick = append(pick, x)
		}
		rest++
	}
	t.Logf("crash matrix: seed %d, shard %d of %d: %d of %d (%d always): %v", seed, seed%Shards+1, Shards, len(pick), len(all), len(always), pick)
	t.Logf("crash matrix: rerun this subset: %s", rerun(strconv.Itoa(seed)))
	t.Logf("crash matrix: the whole matrix: %s", rerun("all"))
	return pick
}

// commitNumber is HEAD's number on its branch, 0 outside a git checkout.
func commitNumber() int {
	out, err := exec.Command("git", "rev-list", "--count", "HEAD").Output()
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0
	}
	return n
}

// packageDir is the test's package directory from the repository's root
// ("workflows/"), "." outside a git checkout.
func packageDir() string {
	out, err := exec.Command("git", "rev-parse", "--show-prefix").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return "."
	}
	return strings.TrimSpace(string(out))
}
