package bench

import (
	"testing"
	"time"

	"github.com/hamaster/hamaster/workflows"
)

func TestWriterViewOnDutyOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	ok := func(s, e int) writeAttempt { return writeAttempt{start: at(s), end: at(e), ok: true} }
	bad := func(s, e int) writeAttempt { return writeAttempt{start: at(s), end: at(e)} }
	tests := []struct {
		name       string
		tries      []writeAttempt
		downs, ups []time.Time
		stall      float64
		failed     int
	}{
		{"steady", []writeAttempt{ok(0, 5), ok(10, 15), ok(20, 25)}, nil, nil, 10, 0},
		{"a stall while up counts", []writeAttempt{ok(0, 5), bad(10, 300), ok(300, 305), ok(310, 315)}, nil, nil, 300, 1},
		// Its own replica drained at 12 and back at 500: the failures
		// between, and until its first success after 500, are not counted.
		{"own replica away", []writeAttempt{ok(0, 5), ok(10, 11), bad(20, 2020), bad(2030, 2035), bad(2040, 2045), ok(2050, 2055), ok(2060, 2065)},
			[]time.Time{at(12)}, []time.Time{at(500)}, 10, 0},
		{"the end of the window closes the last duty", []writeAttempt{ok(0, 5), ok(10, 15)}, nil, nil, 85, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &memberWriter{replica: "r", tries: tc.tries, downs: tc.downs, ups: tc.ups}
			to := tc.tries[len(tc.tries)-1].end
			if tc.name == "the end of the window closes the last duty" {
				to = at(100)
			}
			v := w.view(t0, t0, to)
			if v.StallMS != tc.stall || v.Failed != tc.failed {
				t.Errorf("stall %v ms, %d failed; want %v ms, %d failed", v.StallMS, v.Failed, tc.stall, tc.failed)
			}
		})
	}
}

func TestOverheadFromEvents(t *testing.T) {
	ev := func(wf, step, state string, msec int64) workflows.Event {
		return workflows.Event{Workflow: wf, Step: step, State: state, ElapsedMS: msec}
	}
	events := []workflows.Event{
		ev("rolling-upgrade", "replica-1/surge-add", workflows.StateStart, 0),
		ev("add-replica", "create-vm", workflows.StateDone, 3500),
		ev("add-replica", "add-to-lb", workflows.StateDone, 600),
		ev("add-replica", "preflight", workflows.StateDone, 100),
		ev("add-replica", "", workflows.StateDone, 4300),
		ev("rolling-upgrade", "replica-1/surge-add", workflows.StateDone, 4400),
		ev("remove-replica", "remove-from-lb", workflows.StateDone, 1100),
		ev("remove-replica", "", workflows.StateDone, 1200),
		ev("rolling-upgrade", "", workflows.StateDone, 6000),
	}
	runs := opRuns(events)
	if len(runs) != 3 || runs[0].Workflow != "add-replica" || runs[2].Workflow != "rolling-upgrade" {
		t.Fatalf("runs %+v", runs)
	}
	p := Profile{BootDelay: 3 * time.Second, HealthInterval: 250 * time.Millisecond, HealthyThreshold: 2}
	rows := overhead(p, time.Second, map[string][]opRun{"add-replica": runs[:1], "remove-replica": runs[1:2]})
	add := rows[0]
	// cloud: boot 3 s + streak 0.5 s; replica: 0.5 + 0.1; hamaster: preflight 0.1 + 0.1 between steps.
	if add.CloudMS != 3500 || add.ReplicaMS != 600 || add.HamaMS != 200 || add.GraceMS != 0 {
		t.Errorf("add-replica %+v", add)
	}
	rm := rows[1]
	if rm.GraceMS != 1000 || rm.HamaMS != 200 || rm.CloudMS != 0 {
		t.Errorf("remove-replica %+v", rm)
	}
}

// TestOverheadDrainWindow: the steps between a removal's drain and the end
// of its grace (snapshot, leader move) run during the grace: the window's
// wall span counts once, up to the grace as grace and the rest as
// hamaster's, not the steps' durations on top of it.
func TestOverheadDrainWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	step := func(name string, from, to int) []workflows.Event {
		return []workflows.Event{
			{Workflow: "remove-replica", Step: name, State: workflows.StateStart, Time: at(from)},
			{Workflow: "remove-replica", Step: name, State: workflows.StateDone, Time: at(to), ElapsedMS: int64(to - from)},
		}
	}
	var events []workflows.Event
	events = append(events, step(workflows.StepPreflight, 0, 100)...)
	events = append(events, step(workflows.StepDrainTarget, 110, 150)...)
	events = append(events, step(workflows.StepSnapshot, 160, 290)...)
	events = append(events, step(workflows.StepMoveLeader, 300, 380)...)
	events = append(events, step(workflows.StepRemoveFromLB, 390, 1180)...)
	events = append(events, step(workflows.StepStopReplica, 1190, 3190)...)
	events = append(events, workflows.Event{Workflow: "remove-replica", State: workflows.StateDone, Time: at(3200), ElapsedMS: 3200})
	runs := opRuns(events)
	rows := overhead(Profile{}, time.Second, map[string][]opRun{"remove-replica": runs})
	if len(rows) != 1 {
		t.Fatalf("rows %+v", rows)
	}
	// window 110..1180: 1000 grace + 70 hamaster; preflight 100; between
	// steps 3200 − (100 + 1070 + 2000) = 30.
	rm := rows[0]
	if rm.GraceMS != 1000 || rm.ReplicaMS != 2000 || rm.HamaMS != 200 {
		t.Errorf("remove-replica %+v", rm)
	}
	if want := "preflight 0.10"; len(rm.Top) == 0 || rm.Top[0] != want {
		t.Errorf("largest %v, want %s first", rm.Top, want)
	}
}
