package workflows

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Event is one progress event.
type Event struct {
	Workflow  string `json:"workflow,omitempty"`
	Step      string `json:"step,omitempty"`
	Index     int    `json:"index,omitempty"`
	Total     int    `json:"total,omitempty"`
	State     string `json:"state"`
	ElapsedMS int64  `json:"elapsed_ms"`
	Message   string `json:"message,omitempty"`
	Error     string `json:"error,omitempty"`
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
