package workflows

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// EventSchema is the version of the progress events' JSON shape; it grows
// when a field changes meaning or goes away (new fields do not bump it).
const EventSchema = 1

// Event is one progress event. In --output json each is one line:
// schema, time, run_id and workflow are stamped by Execute (see Stamp).
type Event struct {
	Schema    int       `json:"schema,omitempty"`
	Time      time.Time `json:"time,omitzero"`
	RunID     string    `json:"run_id,omitempty"`
	Workflow  string    `json:"workflow,omitempty"`
	Step      string    `json:"step,omitempty"`
	Index     int       `json:"index,omitempty"`
	Total     int       `json:"total,omitempty"`
	State     string    `json:"state"`
	ElapsedMS int64     `json:"elapsed_ms"`
	Message   string    `json:"message,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Heartbeat marks the periodic "still waiting" events of a wait.
	Heartbeat bool `json:"heartbeat,omitempty"`
}

// Stamp returns a sink that fills in the schema version, the time, the
// run ID and the workflow of every event before passing it to next.
func Stamp(next Sink, workflow, runID string, now func() time.Time) Sink {
	if now == nil {
		now = time.Now
	}
	return stamped{next: next, workflow: workflow, runID: runID, now: now}
}

type stamped struct {
	next            Sink
	workflow, runID string
	now             func() time.Time
}

func (s stamped) Event(e Event) {
	e.Schema = EventSchema
	if e.Time.IsZero() {
		e.Time = s.now().UTC()
	}
	if e.RunID == "" {
		e.RunID = s.runID
	}
	if e.Workflow == "" {
		e.Workflow = s.workflow
	}
	s.next.Event(e)
}

// Sink receives progress events.
type Sink interface{ Event(Event) }

// TextSink prints one line per step for people.
type TextSink struct {
	mu sync.Mutex
	W  io.Writer
}

// Event implements Sink.
func (s *TextSink) Event(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := float64(e.ElapsedMS) / 1000
	switch {
	case e.Step == "" && e.State == StateDone:
		fmt.Fprintf(s.W, "%s finished in %.1fs\n", e.Workflow, secs)
	case e.State == StateStart:
		fmt.Fprintf(s.W, "[%d/%d] %s ...\n", e.Index, e.Total, e.Step)
	case e.State == StateDone:
		fmt.Fprintf(s.W, "[%d/%d] %s done (%.1fs)\n", e.Index, e.Total, e.Step, secs)
	case e.State == StateSkipped:
		fmt.Fprintf(s.W, "[%d/%d] %s skipped: %s\n", e.Index, e.Total, e.Step, e.Message)
	case e.State == StateFailed:
		fmt.Fprintf(s.W, "[%d/%d] %s FAILED after %.1fs: %s\n", e.Index, e.Total, e.Step, secs, e.Error)
	case e.State == StateWaiting:
		fmt.Fprintf(s.W, "        waiting (%.1fs): %s\n", secs, e.Message)
	default:
		fmt.Fprintf(s.W, "        %s\n", e.Message)
	}
}

// JSONSink emits one JSON object per line.
type JSONSink struct {
	mu sync.Mutex
	W  io.Writer
}

// Event implements Sink.
func (s *JSONSink) Event(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	s.W.Write(append(b, '\n'))
}

// Discard drops events.
type Discard struct{}

// Event implements Sink.
func (Discard) Event(Event) {}
