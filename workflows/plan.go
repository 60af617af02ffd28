package workflows

import (
	"time"
)

// PlanSchema is the version of the plan document's JSON shape.
const PlanSchema = 1

// PlanDoc is a workflow's plan as one JSON document (--dry-run --output
// json): the resolved parameters and, per step, the calls it would make.
type PlanDoc struct {
	Schema   int               `json:"schema"`
	Kind     string            `json:"kind"` // "plan"
	Workflow string            `json:"workflow"`
	Cluster  string            `json:"cluster"`
	Provider string            `json:"provider"`
	Params   map[string]string `json:"params"`
	DryRun   bool              `json:"dry_run"`
	// Resume is set when the run would continue an unfinished one.
	Resume *PlanResume `json:"resume,omitempty"`
	Steps  []PlanStep  `json:"steps"`
}

// PlanResume describes the unfinished run a re-run continues.
type PlanResume struct {
	Started  time.Time `json:"started"`
	LastStep string    `json:"last_step"`
	// Done lists the steps the journal marks done (skipped by the run,
	// unless they always run).
	Done []string `json:"done"`
}

// PlanStep is one step of a plan.
type PlanStep struct {
	Index int      `json:"index"`
	Name  string   `json:"name"`
	Calls []string `json:"calls"`
	// Always: the step runs even when a resumed run finds it done.
	Always bool `json:"always,omitempty"`
}

// Doc returns the plan document of wf for cluster and provider; j is the
// journal the run would use and resumed says whether it continues it.
func (w *Workflow) Doc(cluster, provider string, j *Journal, resumed bool) PlanDoc {
	params := map[string]string{}
	for k, v := range w.Params {
		params[k] = v
	}
	doc := PlanDoc{Schema: PlanSchema, Kind: "plan", Workflow: w.Name, Cluster: cluster, Provider: provider, Params: params, Steps: []PlanStep{}}
	for i, s := range w.Steps {
		calls := s.Plan
		if calls == nil {
			calls = []string{}
		}
		doc.Steps = append(doc.Steps, PlanStep{Index: i + 1, Name: s.Name, Calls: calls, Always: s.Always})
	}
	if resumed && j != nil {
		r := &PlanResume{Started: j.Started, LastStep: lastStep(j), Done: []string{}}
		for _, s := range j.Steps {
			if s.State == StateDone {
				r.Done = append(r.Done, s.Name)
			}
		}
		doc.Resume = r
	}
	return doc
}
