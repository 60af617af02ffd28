package workflows

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/lb"
)

// chanSink passes every event to a channel.
type chanSink chan Event

func (c chanSink) Event(e Event) { c <- e }

// A waiting step reports a heartbeat with the elapsed time, what it waits
// for and the last observed state, until the step ends.
func TestWaitHeartbeatReportsTheLastObservedState(t *testing.T) {
	t.Parallel()
	events := make(chanSink, 100)
	var mu sync.Mutex
	var seen []Event
	beats := make(chan Event, 100)
	go func() {
		for e := range events {
			mu.Lock()
			seen = append(seen, e)
			mu.Unlock()
			if e.Heartbeat {
				beats <- e
			}
		}
		close(beats)
	}()
	rn := &Runner{Store: NewJournalStore(t.TempDir(), "c1"), Sink: events, Heartbeat: time.Millisecond}
	wf := &Workflow{Name: "wait", Params: map[string]string{}, Steps: []Step{{Name: "w", Run: func(ctx context.Context, r *Run) error {
		r.Waiting("target x healthy")
		r.Observe("target x: initial (1 of 2 checks passed)")
		// The wait ends once two heartbeats carried the observed state.
		for n := 0; n < 2; {
			select {
			case e := <-beats:
				if strings.Contains(e.Message, "1 of 2 checks passed") {
					n++
				}
			case <-time.After(time.Minute): // a bound on failure, not a wait
				return errors.New("no heartbeat within a minute")
			}
		}
		return nil
	}}}}
	j, _, err := rn.Prepare(wf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Execute(context.Background(), wf, j); err != nil {
		t.Fatal(err)
	}
	close(events) // panics if a heartbeat is still being sent after Execute
	for range beats {
		// until the reader has taken every event and closed beats
	}
	mu.Lock()
	defer mu.Unlock()
	var hb []Event
	for _, e := range seen {
		if e.Heartbeat {
			hb = append(hb, e)
		}
	}
	if len(hb) < 2 {
		t.Fatalf("%d heartbeats", len(hb))
	}
	e := hb[len(hb)-1]
	if e.State != StateWaiting || e.Step != "w" || e.Message != "still waiting for target x healthy; last: target x: initial (1 of 2 checks passed)" || e.ElapsedMS < 0 {
		t.Fatalf("heartbeat %+v", e)
	}
	if last := seen[len(seen)-1]; last.Heartbeat || last.State != StateDone {
		t.Fatalf("last event %+v, want the workflow's done", last)
	}
}

func TestStampFillsSchemaTimeRunAndWorkflow(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := Stamp(&JSONSink{W: &buf}, "add-replica", "run-1", func() time.Time { return now })
	s.Event(Event{Step: "preflight", State: StateStart})
	s.Event(Event{Workflow: "nested", Step: "x", State: StateDone})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%q", buf.String())
	}
	want := `{"schema":1,"time":"2026-01-02T03:04:05Z","run_id":"run-1","workflow":"add-replica","step":"preflight","state":"start","elapsed_ms":0}`
	if lines[0] != want {
		t.Fatalf("got  %s\nwant %s", lines[0], want)
	}
	var e Event
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Workflow != "nested" || e.RunID != "run-1" {
		t.Fatalf("%+v %v", e, err)
	}
}

func TestPlanDoc(t *testing.T) {
	t.Parallel()
	wf := &Workflow{Name: "add-replica", Params: map[string]string{"name": "demo-master-abc"}, Steps: []Step{
		{Name: "preflight", Always: true, Plan: []string{"etcd MemberList"}},
		{Name: "create-vm", Plan: []string{"instances.Create(name)"}},
		{Name: "verify"},
	}}
	j := &Journal{Started: time.Unix(0, 0).UTC(), Steps: []StepRecord{{Name: "preflight", State: StateDone}, {Name: "create-vm", State: StateFailed}, {Name: "verify"}}}
	doc := wf.Doc("demo", "local", j, true)
	b, _ := json.Marshal(doc)
	want := `{"schema":1,"kind":"plan","workflow":"add-replica","cluster":"demo","provider":"local","params":{"name":"demo-master-abc"},"dry_run":false,` +
		`"resume":{"started":"1970-01-01T00:00:00Z","last_step":"create-vm failed","done":["preflight"]},` +
		`"steps":[{"index":1,"name":"preflight","calls":["etcd MemberList"],"always":true},{"index":2,"name":"create-vm","calls":["instances.Create(name)"]},{"index":3,"name":"verify","calls":[]}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	// The document does not alias the workflow's parameters.
	doc.Params["name"] = "changed"
	if wf.Params["name"] != "demo-master-abc" {
		t.Fatal("Doc aliases Params")
	}
	if fresh := wf.Doc("demo", "local", j, false); fresh.Resume != nil {
		t.Fatalf("fresh run has resume %+v", fresh.Resume)
	}
}

func TestHistoryIsAppendOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if recs, err := ReadHistory(dir, "c1"); err != nil || len(recs) != 0 {
		t.Fatalf("no history: %v %v", recs, err)
	}
	var prefix []byte
	for i := range 3 {
		rec := HistoryRecord{RunID: fmt.Sprint("run-", i), Workflow: "add-replica", Params: map[string]string{"name": fmt.Sprint("n", i)}, Result: "ok", StepsDone: []string{"a"}}
		if err := AppendHistory(dir, "c1", rec); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(HistoryFile(dir, "c1"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, prefix) || bytes.Count(b, []byte("\n")) != i+1 {
			t.Fatalf("record %d rewrote the file:\n%s", i, b)
		}
		prefix = b
	}
	recs, err := ReadHistory(dir, "c1")
	if err != nil || len(recs) != 3 || recs[2].RunID != "run-2" || recs[0].Schema != HistorySchema {
		t.Fatalf("%+v %v", recs, err)
	}
	// A torn last line (crash mid-write) is skipped; a bad line before
	// the end is an error naming the line.
	f, _ := os.OpenFile(HistoryFile(dir, "c1"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"run_id":"torn`)
	f.Close()
	if recs, err := ReadHistory(dir, "c1"); err != nil || len(recs) != 3 {
		t.Fatalf("torn last line: %d records, %v", len(recs), err)
	}
	f, _ = os.OpenFile(HistoryFile(dir, "c1"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\n{}\n")
	f.Close()
	if _, err := ReadHistory(dir, "c1"); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("bad middle line: %v", err)
	}
}

func TestHistoryResult(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err    error
		result string
		code   int
	}{
		{nil, "ok", 0},
		{errors.New("boom"), "failed", 1},
		{errkind.Errorf(errkind.FailedPrecondition, "quorum"), "refused", 3},
		{fmt.Errorf("step x: %w", ErrConcluded), "rolled-back", 1},
	}
	for _, c := range cases {
		if r, code := historyResult(c.err); r != c.result || code != c.code {
			t.Errorf("%v: %s %d, want %s %d", c.err, r, code, c.result, c.code)
		}
	}
}

// remove-replica waits the drain grace only for a replica the load
// balancer still sends traffic to, and says when it skips it.
func TestDrainGraceSkippedForADeadReplica(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		target lb.TargetHealth
		grace  time.Duration
		want   time.Duration
		says   string
	}{
		{"healthy: full grace", lb.TargetHealth{Name: "v", Healthy: true}, 10 * time.Second, 10 * time.Second, ""},
		{"dead: no grace", lb.TargetHealth{Name: "v", Reason: "connection refused"}, 10 * time.Second, 0, "v is not healthy in the load balancer (connection refused): it gets no traffic, so the 10s drain grace is skipped"},
		{"dead, no reason given", lb.TargetHealth{Name: "v"}, time.Second, 0, "(unhealthy)"},
		{"no grace asked: nothing to say", lb.TargetHealth{Name: "v"}, 0, 0, ""},
	}
	for _, c := range cases {
		rec := &recorder{}
		r := &Run{sink: rec, step: StepRemoveFromLB, started: time.Now(), now: time.Now}
		if got := drainGrace(r, "v", c.target, c.grace); got != c.want {
			t.Errorf("%s: grace %s, want %s", c.name, got, c.want)
		}
		said := ""
		for _, e := range rec.events {
			said += e.Message
		}
		if c.says == "" && said != "" || !strings.Contains(said, c.says) {
			t.Errorf("%s: said %q, want %q", c.name, said, c.says)
		}
	}
}
