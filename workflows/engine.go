// Package workflows is hamaster's engine and its workflows. A workflow is a
// named list of steps; each step observes the world first and treats
// "already done" as success, so re-running a workflow converges. A journal
// per cluster records when each step starts and ends; re-running the same
// command after a crash continues at the first unfinished step with the
// parameters and data the first run recorded.
package workflows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// Step is one named, idempotent unit of a workflow.
type Step struct {
	// Name is unique within the workflow and stable across releases: the
	// journal refers to steps by name.
	Name string
	// Plan lists, for --dry-run and confirmation, the provider calls the
	// step would make.
	Plan []string
	// Run observes, compares, acts. It must succeed when its effect is
	// already there.
	Run func(ctx context.Context, r *Run) error
	// Always steps run even when the journal says they are done (checks
	// whose result later steps depend on, such as preflight).
	Always bool
}

// Workflow is a named list of steps with the parameters that identify it.
type Workflow struct {
	Name string
	// Params are the resolved arguments (a generated replica name included);
	// a resumed run gets the recorded ones back.
	Params map[string]string
	Steps  []Step
	// Check, when set, runs before the cluster lock is taken: read-only
	// validation whose refusal must not depend on reaching etcd.
	Check func(ctx context.Context) error
}

// check runs Check, when set.
func (w *Workflow) check(ctx context.Context) error {
	if w.Check == nil {
		return nil
	}
	return w.Check(ctx)
}

// Plan renders the workflow's plan for people.
func (w *Workflow) Plan() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan: %s", w.Name)
	keys := slices.Sorted(maps.Keys(w.Params))
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, w.Params[k])
	}
	b.WriteString("\n")
	for i, s := range w.Steps {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, s.Name)
		for _, p := range s.Plan {
			fmt.Fprintf(&b, "        - %s\n", p)
		}
	}
	return b.String()
}

// Run is what a step sees of the running workflow: parameters, recorded
// data, and a way to say what it is waiting for.
type Run struct {
	journal *Journal
	store   *JournalStore
	sink    Sink
	step    string
	started time.Time
	now     func() time.Time
	// hb is the step's heartbeat (see heartbeat.go).
	hb heartbeat
	// changed: a step that may change the world started before this one
	// (in this run or an earlier one of the journal).
	changed bool
}

// Param returns a workflow parameter.
func (r *Run) Param(k string) string { return r.journal.Params[k] }

// Changed reports whether a step that may change the world (one not
// Always) started before this step, in this run or an earlier run of the
// same journal: a check that must only refuse before anything changed
// (a half-done removal is better finished) tests it.
func (r *Run) Changed() bool { return r.changed }

// get returns data recorded by an earlier step (of this or a crashed
// run); steps use the typed keys of state.go.
func (r *Run) get(k string) string { return r.journal.Data[k] }

// set records data durably before returning.
func (r *Run) set(k, v string) error {
	if r.journal.Data[k] == v {
		return nil
	}
	r.journal.Data[k] = v
	return r.store.Save(r.journal)
}

// Waiting reports what the step is waiting for (a progress line), then
// every heartbeat interval until the step ends: the elapsed time, what is
// awaited and the last state the wait observed (see Observe).
func (r *Run) Waiting(format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	r.sink.Event(Event{Step: r.step, State: StateWaiting, ElapsedMS: r.now().Sub(r.started).Milliseconds(), Message: what})
	r.hb.start(r, what)
}

// Info reports something worth showing the operator (a snapshot path).
func (r *Run) Info(format string, args ...any) {
	r.sink.Event(Event{Step: r.step, State: "info", ElapsedMS: r.now().Sub(r.started).Milliseconds(), Message: fmt.Sprintf(format, args...)})
}

// Runner executes workflows against a cluster's journal.
type Runner struct {
	Store *JournalStore
	Sink  Sink
	// AfterStep, when set, is called after each step is journaled as done;
	// an error stops the run there as if the process had died (test-only
	// fault hook for crash-resume tests).
	AfterStep func(step string) error
	// BeforeChange, when set, is called once before the first step that
	// may change the world starts (not before Always steps: checks and
	// reads); an error stops the run there.
	BeforeChange func() error
	// Fence, when set, proves before each step that the cluster lock is
	// still held; an error stops the run before the step changes anything.
	Fence func(ctx context.Context) error
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Heartbeat is the interval of the "still waiting" events of a wait
	// (DefaultHeartbeat when zero).
	Heartbeat time.Duration
}

// ErrConcluded marks a step failure after which the workflow cleaned up
// (a rollback completed): the run is over and the journal is closed, so the
// next command starts fresh instead of resuming.
var ErrConcluded = errors.New("rolled back")

// ErrUnfinished marks a refusal because another workflow is half-done.
var ErrUnfinished = errors.New("unfinished workflow in the journal")

// Prepare loads the journal and decides how wf runs: fresh, or resumed
// from an unfinished run of the same workflow (whose recorded parameters
// fill in any the caller left empty). An unfinished run of a different
// workflow refuses with errkind.FailedPrecondition, unless supersede
// accepts it (e.g. removing the replica a crashed add-replica was adding).
// It returns the journal to run with and whether this is a resume.
func (rn *Runner) Prepare(wf *Workflow, supersede func(prev, next *Journal) bool) (*Journal, bool, error) {
	prev, err := rn.Store.Load()
	if err != nil {
		return nil, false, err
	}
	j := &Journal{Workflow: wf.Name, Params: wf.Params, Started: rn.now(), Data: map[string]string{}, prev: prev}
	if prev != nil && !prev.Finished {
		if prev.Workflow == wf.Name && paramsCompatible(prev.Params, wf.Params) {
			for k, v := range prev.Params {
				if wf.Params[k] == "" {
					wf.Params[k] = v
				}
			}
			prev.Params = wf.Params
			return prev, true, nil
		}
		if supersede == nil || !supersede(prev, j) {
			return nil, false, errkind.Errorf(errkind.FailedPrecondition,
				"%w: %s %s started %s did not finish (last step %q); re-run that command to finish it first",
				ErrUnfinished, prev.Workflow, formatParams(prev.Params), prev.Started.Format(time.RFC3339), lastStep(prev))
		}
	}
	return j, false, nil
}

// paramsCompatible: every parameter the new run names explicitly agrees
// with the recorded one.
func paramsCompatible(recorded, given map[string]string) bool {
	for k, v := range given {
		if v != "" && recorded[k] != "" && recorded[k] != v {
			return false
		}
	}
	return true
}

func formatParams(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if p[k] != "" {
			parts = append(parts, k+"="+p[k])
		}
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func lastStep(j *Journal) string {
	last := ""
	for _, s := range j.Steps {
		if s.State != "" {
			last = s.Name + " " + s.State
		}
	}
	return last
}

func (rn *Runner) now() time.Time {
	if rn.Now != nil {
		return rn.Now()
	}
	return time.Now()
}

// align makes j's step list wf's: the steps in wf's order, each with
// what j recorded of it, and j unfinished.
func (j *Journal) align(wf *Workflow) {
	recorded := map[string]StepRecord{}
	for _, s := range j.Steps {
		recorded[s.Name] = s
	}
	j.Steps = j.Steps[:0]
	for _, s := range wf.Steps {
		rec, ok := recorded[s.Name]
		if !ok {
			rec = StepRecord{Name: s.Name}
		}
		j.Steps = append(j.Steps, rec)
	}
	j.Finished = false
}

// failed journals step's failure err at end and returns err (with the
// journal's own error, if saving failed). A step that concluded the run
// (ErrConcluded) finishes the journal; a run that changed something
// keeps it to resume; one refused before any change leaves no trace (the
// previous journal, if the run superseded one, or none).
func (rn *Runner) failed(j *Journal, step string, end time.Time, err error, changed bool) error {
	j.record(step, StateFailed, end, err)
	var serr error
	switch {
	case errors.Is(err, ErrConcluded):
		j.Finished = true
		serr = rn.Store.Save(j)
	case changed:
		serr = rn.Store.Save(j)
	case j.prev != nil && j.prev != j:
		serr = rn.Store.Save(j.prev) // refused before any change: no trace
	default:
		serr = rn.Store.Remove()
	}
	if serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// Execute runs wf with journal j (from Prepare): steps the journal marks
// done are skipped unless Always; the others run in order, each journaled
// at start and end. The first failure stops the run, journaled as failed;
// a re-run resumes there.
func (rn *Runner) Execute(ctx context.Context, wf *Workflow, j *Journal) error {
	j.align(wf)
	if err := rn.Store.Save(j); err != nil {
		return err
	}
	wfStart := rn.now()
	// changed: a step that may change the world has started in this
	// journal (now or in an earlier run).
	changed := false
	for _, s := range wf.Steps {
		if !s.Always && j.started(s.Name) {
			changed = true
		}
	}
	for i, s := range wf.Steps {
		if j.done(s.Name) && !s.Always {
			rn.Sink.Event(Event{Workflow: wf.Name, Step: s.Name, Index: i + 1, Total: len(wf.Steps), State: StateSkipped, Message: "done in an earlier run"})
			continue
		}
		if rn.Fence != nil {
			if err := rn.Fence(ctx); err != nil {
				return fmt.Errorf("%s: stopped before step %s: %w", wf.Name, s.Name, err)
			}
		}
		if !s.Always && rn.BeforeChange != nil {
			if err := rn.BeforeChange(); err != nil {
				return fmt.Errorf("%s: before step %s: %w", wf.Name, s.Name, err)
			}
			rn.BeforeChange = nil
		}
		start := rn.now()
		changedBefore := changed
		changed = changed || !s.Always
		j.record(s.Name, StateStart, start, nil)
		if err := rn.Store.Save(j); err != nil {
			return err
		}
		rn.Sink.Event(Event{Workflow: wf.Name, Step: s.Name, Index: i + 1, Total: len(wf.Steps), State: StateStart})
		run := &Run{journal: j, store: rn.Store, sink: rn.Sink, step: s.Name, started: start, now: rn.now, hb: heartbeat{every: rn.Heartbeat}, changed: changedBefore}
		err := s.Run(ctx, run)
		run.hb.stop()
		end := rn.now()
		if err != nil {
			err = rn.failed(j, s.Name, end, err, changed)
			rn.Sink.Event(Event{Workflow: wf.Name, Step: s.Name, Index: i + 1, Total: len(wf.Steps), State: StateFailed, ElapsedMS: end.Sub(start).Milliseconds(), Error: err.Error()})
			return fmt.Errorf("%s: step %s: %w", wf.Name, s.Name, err)
		}
		j.record(s.Name, StateDone, end, nil)
		if err := rn.Store.Save(j); err != nil {
			return err
		}
		rn.Sink.Event(Event{Workflow: wf.Name, Step: s.Name, Index: i + 1, Total: len(wf.Steps), State: StateDone, ElapsedMS: end.Sub(start).Milliseconds()})
		if rn.AfterStep != nil {
			if err := rn.AfterStep(s.Name); err != nil {
				return err
			}
		}
	}
	j.Finished = true
	if err := rn.Store.Save(j); err != nil {
		return err
	}
	rn.Sink.Event(Event{Workflow: wf.Name, State: StateDone, ElapsedMS: rn.now().Sub(wfStart).Milliseconds(), Message: "finished"})
	return nil
}
