package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hamaster/hamaster/providers"
)

// writeAttempt is one etcd write of a member writer.
type writeAttempt struct {
	start, end time.Time
	ok         bool
}

// memberWriter writes to etcd through one replica's own member only, as
// the apiserver on that replica does (kube-up and kubeadm give it
// --etcd-servers=https://127.0.0.1:2379: its local member).
type memberWriter struct {
	replica string
	mu      sync.Mutex
	tries   []writeAttempt
	// downs and ups are when the writer's own replica started going away
	// (its VM about to be stopped, or out of the LB for good; a drain
	// grace is counted, since its apiserver still serves sessions and
	// etcd leadership moves off its member then) and when it was back
	// (its VM recreated); between the two the writer is off duty: what
	// it sees is its own member gone, which no client of a surviving
	// replica sees.
	downs, ups []time.Time
}

// writeInterval paces each writer: 100 writes a second, a resolution of
// 10 ms on the stalls.
const writeInterval = 10 * time.Millisecond

// writeTimeout bounds one write, as a client's request timeout does.
const writeTimeout = 2 * time.Second

// run writes until ctx ends.
func (w *memberWriter) run(ctx context.Context, put func(ctx context.Context, key, val string) error) {
	tick := time.NewTicker(writeInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		t0 := time.Now()
		err := put(wctx, "/bench/writer/"+w.replica, fmt.Sprint(i))
		cancel()
		if ctx.Err() != nil {
			return // the run ended mid-write: not an attempt
		}
		w.mu.Lock()
		w.tries = append(w.tries, writeAttempt{start: t0, end: time.Now(), ok: err == nil})
		w.mu.Unlock()
	}
}

func (w *memberWriter) down(t time.Time) { w.mu.Lock(); w.downs = append(w.downs, t); w.mu.Unlock() }
func (w *memberWriter) up(t time.Time)   { w.mu.Lock(); w.ups = append(w.ups, t); w.mu.Unlock() }

// writerView is what one writer saw while on duty.
type writerView struct {
	Replica string  `json:"replica"`
	Writes  int     `json:"writes"`
	Failed  int     `json:"failed"`
	StallMS float64 `json:"longest_stall_ms"`
	// StallAtMS is when the longest stall began (ms since the run start).
	StallAtMS float64 `json:"stall_at_ms"`
}

// view computes the writer's longest stall and failed writes over
// [from, to], on duty only: from its first successful write until its
// replica goes down, and again from its first success after the replica
// is back. A stall is the time between two successful writes (or between
// the last one and the end of a duty period).
func (w *memberWriter) view(start, from, to time.Time) writerView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := writerView{Replica: w.replica}
	onDuty := false
	var last time.Time
	di, ui := 0, 0
	offDuty := func(at time.Time) {
		if onDuty && at.Sub(last) > time.Duration(v.StallMS*float64(time.Millisecond)) {
			v.StallMS, v.StallAtMS = ms(at.Sub(last)), ms(last.Sub(start))
		}
		onDuty = false
	}
	for _, a := range w.tries {
		for di < len(w.downs) && !w.downs[di].After(a.start) {
			offDuty(w.downs[di])
			di++
		}
		for ui < len(w.ups) && !w.ups[ui].After(a.start) {
			ui++
		}
		// Off duty from a down until the first success after its up.
		away := di > ui
		if a.start.Before(from) || a.end.After(to) || away {
			continue
		}
		if !onDuty {
			if a.ok {
				onDuty, last = true, a.end
			}
			continue
		}
		v.Writes++
		if !a.ok {
			v.Failed++
			continue
		}
		if d := a.end.Sub(last); ms(d) > v.StallMS {
			v.StallMS, v.StallAtMS = ms(d), ms(last.Sub(start))
		}
		last = a.end
	}
	offDuty(to)
	return v
}

// writers are the member writers of one run, one per replica, started as
// replicas appear. A nil *writers has none (start, down and up do
// nothing).
type writers struct {
	ctx      context.Context
	stateDir string
	cluster  string
	mu       sync.Mutex
	byName   map[string]*memberWriter
	wg       sync.WaitGroup
	errs     []error
}

func newWriters(ctx context.Context, stateDir, cluster string) *writers {
	return &writers{ctx: ctx, stateDir: stateDir, cluster: cluster, byName: map[string]*memberWriter{}}
}

// start begins a writer through r's own member (once per replica).
func (ws *writers) start(r providers.Replica) {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byName[r.Name] != nil {
		return
	}
	w := &memberWriter{replica: r.Name}
	ws.byName[r.Name] = w
	ws.wg.Go(func() {
		cli, err := providers.OperatorEtcd(ws.ctx, ws.stateDir, ws.cluster, []providers.Replica{r}, nil, nil)
		if err != nil {
			ws.mu.Lock()
			ws.errs = append(ws.errs, fmt.Errorf("etcd writer through %s: %w", r.Name, err))
			ws.mu.Unlock()
			return
		}
		defer cli.Close()
		w.run(ws.ctx, func(ctx context.Context, key, val string) error {
			_, err := cli.Raw().Put(ctx, key, val)
			return err
		})
	})
}

func (ws *writers) get(name string) *memberWriter {
	if ws == nil {
		return nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byName[name]
}

// down marks name's replica going away now; up marks it back.
func (ws *writers) down(name string) {
	if w := ws.get(name); w != nil {
		w.down(time.Now())
	}
}

func (ws *writers) up(name string) {
	if w := ws.get(name); w != nil {
		w.up(time.Now())
	}
}

// wait waits for every writer to end (after ctx) and returns what each
// saw over [from, to], and the errors of writers that could not start.
func (ws *writers) wait(start, from, to time.Time) ([]writerView, []error) {
	ws.wg.Wait()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.viewsLocked(start, from, to), ws.errs
}

// views is what each writer saw over [from, to] (after wait).
func (ws *writers) views(start, from, to time.Time) []writerView {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.viewsLocked(start, from, to)
}

func (ws *writers) viewsLocked(start, from, to time.Time) []writerView {
	var out []writerView
	for _, w := range ws.byName {
		out = append(out, w.view(start, from, to))
	}
	return out
}
