package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hamaster/hamaster/workflows"
)

// opRun is one run of a workflow as its progress events tell it: its wall
// time and each step's duration.
type opRun struct {
	Workflow string             `json:"workflow"`
	WallMS   float64            `json:"wall_ms"`
	StepMS   map[string]float64 `json:"step_ms"`
	order    []string
	// start and end are each step's first start and last end, by the
	// events' times (zero when the events carry none): the span of a
	// drain window, whose steps run during the grace.
	start, end map[string]time.Time
}

// opRuns splits events into workflow runs: the step events of a run end
// with its workflow's own done event (nested runs, a surge's add-replica
// and remove-replica, end before the run that holds them).
func opRuns(events []workflows.Event) []opRun {
	open := map[string]*opRun{}
	var out []opRun
	for _, e := range events {
		if e.Workflow == "" {
			continue
		}
		r := open[e.Workflow]
		if r == nil {
			r = &opRun{Workflow: e.Workflow, StepMS: map[string]float64{}, start: map[string]time.Time{}, end: map[string]time.Time{}}
			open[e.Workflow] = r
		}
		switch {
		case e.Step == "" && e.State == workflows.StateDone:
			r.WallMS = float64(e.ElapsedMS)
			out = append(out, *r)
			delete(open, e.Workflow)
		case e.Step != "" && e.State == workflows.StateStart:
			if _, ok := r.start[e.Step]; !ok && !e.Time.IsZero() {
				r.start[e.Step] = e.Time
			}
		case e.Step != "" && e.State == workflows.StateDone:
			if _, ok := r.StepMS[e.Step]; !ok {
				r.order = append(r.order, e.Step)
			}
			r.StepMS[e.Step] += float64(e.ElapsedMS)
			if !e.Time.IsZero() {
				r.end[e.Step] = e.Time
			}
		}
	}
	return out
}

// stepClass is where a step's time goes.
type stepClass int

const (
	// classHamaster: hamaster's own calls and checks.
	classHamaster stepClass = iota
	// classReplica: waiting for the replica's own processes (stopping
	// gracefully, etcd catching up, the apiserver starting) beyond the
	// cloud's part.
	classReplica
	// classGrace: the drain grace period (an operator's setting).
	classGrace
	// classGraceOpen: a step that starts a drain grace the steps after it
	// run during, up to the classGrace step that waits for its rest.
	classGraceOpen
)

// stepBase is a step name without its replica-k/ slot prefix.
func stepBase(step string) string {
	if i := strings.LastIndex(step, "/"); i >= 0 {
		return step[i+1:]
	}
	return step
}

// cloudPart is how much of a step the cloud must take by the profile:
// the VM's boot for a create or recreate, the LB's healthy streak for a
// target added back (the first of HealthyThreshold passing checks comes
// within an interval of the target being up; we count the whole streak),
// nothing else. grace is the drain grace the workflow was given.
func cloudPart(p Profile, step string, grace time.Duration) (cloud time.Duration, class stepClass) {
	streak := time.Duration(p.HealthyThreshold) * p.HealthInterval
	switch stepBase(step) {
	case workflows.StepCreateVM, "recreate":
		return p.BootDelay, classReplica
	case workflows.StepAddToLB, "back-in-lb":
		return streak, classReplica
	case workflows.StepWaitCaughtUp, "health-gate", workflows.StepStopReplica, workflows.StepDeleteVM:
		// A VM's stop is its processes' graceful stop (the apiserver's
		// shutdown delay and watch grace, etcd's stop): the provider's
		// Delete waits for it.
		return 0, classReplica
	case "drain", workflows.StepRemoveFromLB:
		return grace, classGrace
	case workflows.StepDrainTarget:
		return grace, classGraceOpen
	}
	return 0, classHamaster
}

// overheadRow is one operation's split.
type overheadRow struct {
	Op        string
	N         int
	WallMS    float64
	CloudMS   float64
	GraceMS   float64
	ReplicaMS float64
	HamaMS    float64
	Top       []string
}

// overhead splits each operation's mean wall time into the cloud's
// critical path, the drain grace, the wait on the replica's own processes
// and hamaster's own time (the rest), from the runs' step durations.
func overhead(p Profile, grace time.Duration, runs map[string][]opRun) []overheadRow {
	var rows []overheadRow
	for _, op := range []string{"add-replica", "remove-replica", "rolling-upgrade"} {
		rs := runs[op]
		if len(rs) == 0 {
			continue
		}
		row := overheadRow{Op: op, N: len(rs)}
		own := map[string]float64{}
		for _, r := range rs {
			row.WallMS += r.WallMS
			var stepsMS float64
			for i := 0; i < len(r.order); i++ {
				step := r.order[i]
				d := r.StepMS[step]
				cloud, class := cloudPart(p, step, grace)
				if class == classGraceOpen {
					if k := graceClose(p, r.order, i, grace); k > i {
						// The steps from the drain to the end of its
						// grace run during the grace: the window's wall
						// span counts, up to the grace as grace, the
						// rest as hamaster's; its steps' own durations
						// do not add to it.
						span := r.window(i, k)
						c := min(span, ms(cloud))
						stepsMS += span
						row.GraceMS += c
						row.HamaMS += span - c
						own[stepBase(step)+"…"+stepBase(r.order[k])] += span - c
						i = k
						continue
					}
					class = classHamaster
				}
				stepsMS += d
				c := min(d, ms(cloud))
				switch class {
				case classGrace:
					row.GraceMS += c
					row.HamaMS += d - c
					own[stepBase(step)] += d - c
				case classReplica:
					row.CloudMS += c
					row.ReplicaMS += d - c
				default:
					row.HamaMS += d
					own[stepBase(step)] += d
				}
			}
			// Between steps: journal writes, the lock's fence.
			row.HamaMS += max(0, r.WallMS-stepsMS)
			own["between steps"] += max(0, r.WallMS-stepsMS)
		}
		n := float64(len(rs))
		row.WallMS, row.CloudMS, row.GraceMS, row.ReplicaMS, row.HamaMS = row.WallMS/n, row.CloudMS/n, row.GraceMS/n, row.ReplicaMS/n, row.HamaMS/n
		names := make([]string, 0, len(own))
		for k := range own {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return own[names[i]] > own[names[j]] })
		for _, k := range names[:min(3, len(names))] {
			row.Top = append(row.Top, fmt.Sprintf("%s %.2f", k, own[k]/n/1000))
		}
		rows = append(rows, row)
	}
	return rows
}

// graceClose is the index of the classGrace step that ends the drain
// window order[open] starts (the same replica slot), or -1.
func graceClose(p Profile, order []string, open int, grace time.Duration) int {
	slot := strings.TrimSuffix(order[open], stepBase(order[open]))
	for k := open + 1; k < len(order); k++ {
		if _, class := cloudPart(p, order[k], grace); class == classGrace && strings.TrimSuffix(order[k], stepBase(order[k])) == slot {
			return k
		}
	}
	return -1
}

// window is the wall span of steps order[i..k]: from the first's start to
// the last's end by the events' times, or, without times, the sum of the
// steps' durations.
func (r opRun) window(i, k int) float64 {
	from, to := r.start[r.order[i]], r.end[r.order[k]]
	if !from.IsZero() && !to.IsZero() && to.After(from) {
		return float64(to.Sub(from).Microseconds()) / 1000
	}
	var sum float64
	for _, step := range r.order[i : k+1] {
		sum += r.StepMS[step]
	}
	return sum
}

func ratioText(num, den float64) string {
	if den <= 0 {
		return "– (no cloud wait)"
	}
	return fmt.Sprintf("%.2f×", num/den)
}

// printOverhead writes the overhead table.
func printOverhead(w io.Writer, rows []overheadRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tn\twall s\tcloud s\tgrace s\treplica stop/start s\thamaster s\t(wall−grace)/cloud\t(wall−grace)/(cloud+replica)\thamaster's largest, s")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\n", r.Op, r.N, r.WallMS/1000, r.CloudMS/1000, r.GraceMS/1000, r.ReplicaMS/1000, r.HamaMS/1000,
			ratioText(r.WallMS-r.GraceMS, r.CloudMS), ratioText(r.WallMS-r.GraceMS, r.CloudMS+r.ReplicaMS), strings.Join(r.Top, ", "))
	}
	tw.Flush()
}
