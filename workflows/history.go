package workflows

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/hamaster/hamaster/errkind"
)

// HistorySchema is the version of a history line's JSON shape.
const HistorySchema = 1

// HistoryRecord is one line of a cluster's history: one run of a workflow
// that got past its confirmation (a dry run is not recorded).
type HistoryRecord struct {
	Schema   int               `json:"schema"`
	RunID    string            `json:"run_id"`
	Workflow string            `json:"workflow"`
	Params   map[string]string `json:"params"`
	// Args is the command line as given (program name excluded).
	Args     []string  `json:"args,omitempty"`
	User     string    `json:"user"`
	Host     string    `json:"host"`
	Version  string    `json:"hamaster_version"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	Resumed  bool      `json:"resumed,omitempty"`
	Result   string    `json:"result"` // ok, failed, refused, rolled-back
	ExitCode int       `json:"exit_code"`
	Error    string    `json:"error,omitempty"`
	// StepsDone are the steps the journal marks done at the end, in order
	// (including those an earlier, crashed run did).
	StepsDone []string `json:"steps_done"`
}

// HistoryFile is where a cluster's history is kept: beside its journal.
func HistoryFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, cluster, "history.jsonl")
}

// AppendHistory appends rec as one line to the cluster's history. The file
// is only ever opened for appending and each record is one write, so
// earlier lines are never rewritten.
func AppendHistory(stateDir, cluster string, rec HistoryRecord) error {
	rec.Schema = HistorySchema
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode history record: %w", err)
	}
	path := HistoryFile(stateDir, cluster)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("history %s: append: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("history %s: sync: %w", path, err)
	}
	return f.Close()
}

// ReadHistory returns the cluster's history, oldest first (none: empty).
// A torn last line (a crash mid-write) is skipped; any other malformed
// line is an error naming it.
func ReadHistory(stateDir, cluster string) ([]HistoryRecord, error) {
	path := HistoryFile(stateDir, cluster)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return []HistoryRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	defer f.Close()
	out := []HistoryRecord{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var bad error
	for n := 1; sc.Scan(); n++ {
		if bad != nil {
			return nil, bad // a malformed line that was not the last
		}
		var rec HistoryRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			bad = fmt.Errorf("history %s line %d is not a JSON record: %w", path, n, err)
			continue
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	return out, nil
}

// NewRunID returns a fresh run ID (a random UUID).
func NewRunID() string { return uuid.NewString() }

// historyResult classifies a run's error for the history.
func historyResult(err error) (string, int) {
	switch {
	case err == nil:
		return "ok", 0
	case errors.Is(err, ErrConcluded):
		return "rolled-back", errkind.ExitCode(err)
	case errkind.ExitCode(err) == errkind.ExitRefused:
		return "refused", errkind.ExitRefused
	default:
		return "failed", errkind.ExitCode(err)
	}
}

// historyRecord builds the history line of a run of wf with journal j.
func (d *Deps) historyRecord(runID string, wf *Workflow, j *Journal, resumed bool, started, ended time.Time, err error) HistoryRecord {
	result, code := historyResult(err)
	rec := HistoryRecord{RunID: runID, Workflow: wf.Name, Params: wf.Params, Args: d.Args, User: d.User, Host: d.Host,
		Version: d.Version, Started: started.UTC(), Ended: ended.UTC(), Resumed: resumed, Result: result, ExitCode: code, StepsDone: []string{}}
	if err != nil {
		rec.Error = err.Error()
	}
	if j != nil {
		for _, s := range j.Steps {
			if s.State == StateDone {
				rec.StepsDone = append(rec.StepsDone, s.Name)
			}
		}
	}
	return rec
}

// logger is d.Logger, or one that discards.
func (d *Deps) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}
