package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/internal/fsutil"
)

// Step states recorded in the journal and emitted as progress events.
const (
	StateStart   = "start"
	StateDone    = "done"
	StateFailed  = "failed"
	StateSkipped = "skipped"
	StateWaiting = "waiting"
)

// StepRecord is one step's line in the journal.
type StepRecord struct {
	Name    string    `json:"name"`
	State   string    `json:"state"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Journal is the durable record of one workflow run on one cluster. It is
// what lets a re-run continue at the first unfinished step.
type Journal struct {
	Workflow string            `json:"workflow"`
	Params   map[string]string `json:"params"`
	Started  time.Time         `json:"started"`
	Finished bool              `json:"finished"`
	Steps    []StepRecord      `json:"steps"`
	// Data holds what steps recorded for later steps and later runs (a
	// reserved address, a member ID, a last known-good template).
	Data map[string]string `json:"data,omitempty"`

	// prev is the journal this one replaces, restored when a fresh run
	// fails before changing anything (a refused preflight leaves no trace).
	prev *Journal
}

// done reports whether the named step finished in this journal.
func (j *Journal) done(name string) bool {
	for _, s := range j.Steps {
		if s.Name == name {
			return s.State == StateDone
		}
	}
	return false
}

// started reports whether the named step ever started in this journal.
func (j *Journal) started(name string) bool {
	for _, s := range j.Steps {
		if s.Name == name {
			return s.State != ""
		}
	}
	return false
}

func (j *Journal) record(name, state string, now time.Time, err error) {
	for i := range j.Steps {
		if j.Steps[i].Name != name {
			continue
		}
		j.Steps[i].State = state
		if state == StateStart {
			j.Steps[i].Started = now
			j.Steps[i].Error = ""
		} else {
			j.Steps[i].Ended = now
		}
		if err != nil {
			j.Steps[i].Error = err.Error()
		}
		return
	}
}

// Remove deletes the journal file; absent is success.
func (s *JournalStore) Remove() error {
	if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove journal: %w", err)
	}
	return nil
}

// JournalStore keeps a cluster's journal in one file, written atomically
// (temp file, fsync, rename, fsync of the directory) so a crash leaves
// either the old or the new journal, never a torn one.
type JournalStore struct {
	Path string
}

// NewJournalStore returns the store for a cluster under stateDir.
func NewJournalStore(stateDir, cluster string) *JournalStore {
	return &JournalStore{Path: filepath.Join(stateDir, cluster, "journal.json")}
}

// Load returns the journal, or nil when there is none.
func (s *JournalStore) Load() (*Journal, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", s.Path, err)
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal %s is corrupt (move it away to start over): %w", s.Path, err)
	}
	if j.Data == nil {
		j.Data = map[string]string{}
	}
	return &j, nil
}

// Save writes the journal atomically.
func (s *JournalStore) Save(j *Journal) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	return fsutil.WriteFileAtomic(s.Path, b, 0o600)
}
