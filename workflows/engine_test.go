package workflows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

// recorder is a Sink that keeps events.
type recorder struct{ events []Event }

func (r *recorder) Event(e Event) { r.events = append(r.events, e) }

func (r *recorder) states(step string) []string {
	var out []string
	for _, e := range r.events {
		if e.Step == step {
			out = append(out, e.State)
		}
	}
	return out
}

// countingWorkflow has three steps that count their runs; step "b" fails
// while failB is set, and "check" is an Always step.
func countingWorkflow(runs map[string]int, failB *bool) *Workflow {
	const aOutput TextKey = "a-output"
	step := func(name string, always bool) Step {
		return Step{Name: name, Always: always, Run: func(ctx context.Context, r *Run) error {
			runs[name]++
			if name == "b" && *failB {
				return errors.New("boom")
			}
			if name == "a" {
				return aOutput.Set(r, "42")
			}
			if name == "c" && aOutput.Get(r) != "42" {
				return errors.New("data of step a lost")
			}
			return nil
		}}
	}
	return &Workflow{Name: "count", Params: map[string]string{"name": "x"}, Steps: []Step{step("check", true), step("a", false), step("b", false), step("c", false)}}
}

func TestResumeContinuesAtFirstUnfinishedStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runs := map[string]int{}
	failB := true
	rec := &recorder{}
	rn := &Runner{Store: NewJournalStore(dir, "c1"), Sink: rec}

	wf := countingWorkflow(runs, &failB)
	j, resumed, err := rn.Prepare(wf, nil)
	if err != nil || resumed {
		t.Fatalf("Prepare fresh: resumed=%v err=%v", resumed, err)
	}
	if err := rn.Execute(context.Background(), wf, j); err == nil || !strings.Contains(err.Error(), "step b: boom") {
		t.Fatalf("first run: want failure at step b, got %v", err)
	}
	failB = false
	wf = countingWorkflow(runs, &failB)
	wf.Params["name"] = "" // a re-run without the flag gets the recorded value
	j, resumed, err = rn.Prepare(wf, nil)
	if err != nil || !resumed {
		t.Fatalf("Prepare after failure: resumed=%v err=%v", resumed, err)
	}
	if wf.Params["name"] != "x" {
		t.Fatalf("recorded param not restored: %q", wf.Params["name"])
	}
	if err := rn.Execute(context.Background(), wf, j); err != nil {
		t.Fatalf("resume: %v", err)
	}
	want := map[string]int{"check": 2, "a": 1, "b": 2, "c": 1}
	for k, v := range want {
		if runs[k] != v {
			t.Errorf("step %s ran %d times, want %d", k, runs[k], v)
		}
	}
	if got := rec.states("a"); strings.Join(got, ",") != "start,done,skipped" {
		t.Errorf("events of a: %v", got)
	}
	j, err = rn.Store.Load()
	if err != nil || !j.Finished {
		t.Fatalf("journal not finished: %+v %v", j, err)
	}
}

func TestPrepareRefusesOtherUnfinishedWorkflow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := NewJournalStore(dir, "c1")
	if err := store.Save(&Journal{Workflow: "add-replica", Params: map[string]string{"name": "m-1"}, Data: map[string]string{"address": "127.0.9.3"}, Steps: []StepRecord{{Name: "create-vm", State: StateStart}}}); err != nil {
		t.Fatal(err)
	}
	rn := &Runner{Store: store, Sink: Discard{}}
	cases := []struct {
		name      string
		wf        *Workflow
		supersede func(prev, next *Journal) bool
		wantErr   error
		wantAddr  string
	}{
		{"other workflow refused", &Workflow{Name: "remove-replica", Params: map[string]string{"name": "m-2"}}, SupersedeAdd("m-2"), errkind.FailedPrecondition, ""},
		{"same workflow, conflicting param", &Workflow{Name: "add-replica", Params: map[string]string{"name": "m-9"}}, nil, errkind.FailedPrecondition, ""},
		{"remove of the half-added replica supersedes", &Workflow{Name: "remove-replica", Params: map[string]string{"name": "m-1"}}, SupersedeAdd("m-1"), nil, "127.0.9.3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, _, err := rn.Prepare(c.wf, c.supersede)
			if !errors.Is(err, c.wantErr) && !(c.wantErr == nil && err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if err == nil && j.Data["address"] != c.wantAddr {
				t.Fatalf("address carried over = %q, want %q", j.Data["address"], c.wantAddr)
			}
		})
	}
}

func TestAfterStepHookStopsLikeACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runs := map[string]int{}
	failB := false
	crash := errors.New("crash")
	rn := &Runner{Store: NewJournalStore(dir, "c1"), Sink: Discard{}, AfterStep: func(s string) error {
		if s == "a" {
			return crash
		}
		return nil
	}}
	wf := countingWorkflow(runs, &failB)
	j, _, _ := rn.Prepare(wf, nil)
	if err := rn.Execute(context.Background(), wf, j); !errors.Is(err, crash) {
		t.Fatalf("want crash, got %v", err)
	}
	loaded, err := rn.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.done("a") || loaded.done("b") || loaded.Finished {
		t.Fatalf("journal after crash: %+v", loaded)
	}
}

func TestJournalStoreAtomicAndUnwritable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := NewJournalStore(dir, "c1")
	if err := store.Save(&Journal{Workflow: "w"}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "c1"))
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
	st, _ := os.Stat(store.Path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode %v", st.Mode())
	}
	if os.Geteuid() == 0 {
		// root ignores permissions; use a path under a regular file.
		f := filepath.Join(dir, "file")
		os.WriteFile(f, nil, 0o600)
		bad := &JournalStore{Path: filepath.Join(f, "c1", "journal.json")}
		if err := bad.Save(&Journal{}); !errors.Is(err, errkind.InvalidArgument) {
			t.Fatalf("unwritable state dir: %v", err)
		}
		return
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o500)
	bad := NewJournalStore(ro, "c1")
	if err := bad.Save(&Journal{}); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), ro) {
		t.Fatalf("unwritable state dir: %v", err)
	}
}

func TestPlanListsStepsAndCalls(t *testing.T) {
	t.Parallel()
	wf := &Workflow{Name: "add-replica", Params: map[string]string{"name": "m-1"}, Steps: []Step{{Name: "a", Plan: []string{"call X"}}, {Name: "b"}}}
	got := wf.Plan()
	for _, want := range []string{"Plan: add-replica name=m-1", " 1. a", "- call X", " 2. b"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
}

// BeforeChange runs once, before the first step that may change the
// world, never for a workflow of Always steps (checks and reads), and its
// error stops the run before that step.
func TestBeforeChangeRunsOnceBeforeTheFirstChange(t *testing.T) {
	t.Parallel()
	var order []string
	step := func(name string, always bool) Step {
		return Step{Name: name, Always: always, Run: func(context.Context, *Run) error {
			order = append(order, name)
			return nil
		}}
	}
	for _, tc := range []struct {
		name  string
		steps []Step
		hook  error
		want  string
	}{
		{"before the first change", []Step{step("check", true), step("a", false), step("b", false)}, nil, "check hook a b"},
		{"reads only", []Step{step("check", true), step("read", true)}, nil, "check read"},
		{"refused", []Step{step("check", true), step("a", false)}, errors.New("unwritable"), "check hook"},
	} {
		order = nil
		rn := &Runner{Store: NewJournalStore(t.TempDir(), "c1"), Sink: Discard{}, BeforeChange: func() error {
			order = append(order, "hook")
			return tc.hook
		}}
		wf := &Workflow{Name: "w", Steps: tc.steps}
		j, _, err := rn.Prepare(wf, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = rn.Execute(context.Background(), wf, j)
		if (err != nil) != (tc.hook != nil) || (tc.hook != nil && !errors.Is(err, tc.hook)) {
			t.Errorf("%s: Execute = %v, want %v", tc.name, err, tc.hook)
		}
		if got := strings.Join(order, " "); got != tc.want {
			t.Errorf("%s: ran %q, want %q", tc.name, got, tc.want)
		}
	}
}
