package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hamaster/hamaster/providers"
)

var _ providers.ReplicaDiagnoser = (*instances)(nil)

// nodeStatus is the part of a node's status file (STATUS_FILE) Diagnose
// reads; its JSON names and values are the node's documented contract.
type nodeStatus struct {
	PID            int    `json:"pid"`
	Etcd           string `json:"etcd"`
	EtcdError      string `json:"etcd_error"`
	APIServer      string `json:"apiserver"`
	APIServerError string `json:"apiserver_error"`
}

// Diagnose implements providers.ReplicaDiagnoser from the replica's pid
// file, status file and log: a process that is gone, an apiserver that
// refused to start (bad flag, certificate) and etcd that failed are
// failures; the cause quotes the log's last error.
func (in *instances) Diagnose(ctx context.Context, name string) (providers.Diagnosis, error) {
	if _, err := in.Get(ctx, name); err != nil {
		return providers.Diagnosis{}, err
	}
	logPath := in.p.l.rfile(name, "node.log")
	pid := in.proc(name).pid()
	if pid == 0 {
		return providers.Diagnosis{Failed: true, Cause: fmt.Sprintf("process of replica %s is not running (exited); last log error: %s", name, lastLogError(logPath))}, nil
	}
	b, err := os.ReadFile(in.p.l.rfile(name, "status.json"))
	var st nodeStatus
	if err != nil || json.Unmarshal(b, &st) != nil || st.PID != pid {
		return providers.Diagnosis{}, nil // starting: no status of this process yet
	}
	switch {
	case st.APIServer == "refused":
		return providers.Diagnosis{Failed: true, Cause: fmt.Sprintf("apiserver of replica %s refused to start: %s", name, st.APIServerError)}, nil
	case st.Etcd == "failed":
		return providers.Diagnosis{Failed: true, Cause: fmt.Sprintf("etcd of replica %s failed: %s", name, st.EtcdError)}, nil
	}
	return providers.Diagnosis{}, nil
}

// lastLogError returns the last ERROR record of a node's JSON log (its
// message and err), or the last line when there is none.
func lastLogError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(-64<<10, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Err   string `json:"err"`
		}
		if json.Unmarshal(lines[i], &rec) != nil || rec.Level != "ERROR" {
			continue
		}
		if rec.Err != "" {
			return rec.Msg + ": " + rec.Err
		}
		return rec.Msg
	}
	if len(lines) > 0 {
		return strings.TrimSpace(string(lines[len(lines)-1]))
	}
	return "(empty log)"
}
