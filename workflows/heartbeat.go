package workflows

import (
	"sync"
	"time"
)

// DefaultHeartbeat is how often a waiting step reports that it still waits.
const DefaultHeartbeat = 10 * time.Second

// heartbeat emits a "still waiting" event every interval while a step
// waits, so an operator never watches minutes of silence.
type heartbeat struct {
	every time.Duration

	mu   sync.Mutex
	what string
	last string
	done chan struct{}
	wg   sync.WaitGroup
}

// Observe records the last state a wait saw ("target x: initial (1 of 2
// checks passed)"); the next heartbeat reports it.
func (r *Run) Observe(state string) {
	r.hb.mu.Lock()
	r.hb.last = state
	r.hb.mu.Unlock()
}

// start begins (or retargets) the heartbeat of r's step.
func (h *heartbeat) start(r *Run, what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.what, h.last = what, ""
	if h.done != nil {
		return
	}
	every := h.every
	if every <= 0 {
		every = DefaultHeartbeat
	}
	h.done = make(chan struct{})
	h.wg.Add(1)
	go func(done <-chan struct{}) {
		defer h.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			h.mu.Lock()
			msg := "still waiting for " + h.what
			if h.last != "" {
				msg += "; last: " + h.last
			}
			h.mu.Unlock()
			r.sink.Event(Event{Step: r.step, State: StateWaiting, ElapsedMS: r.now().Sub(r.started).Milliseconds(), Message: msg, Heartbeat: true})
		}
	}(h.done)
}

// stop ends the heartbeat; no event is emitted after it returns.
func (h *heartbeat) stop() {
	h.mu.Lock()
	if h.done != nil {
		close(h.done)
		h.done = nil
	}
	h.mu.Unlock()
	h.wg.Wait()
}
