package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// --log-level debug reaches the etcd client (its zap lines bridged to the
// CLI's slog logger) and --log-format json makes every stderr line JSON;
// stdout gets none of it.
func TestDebugLogsReachTheEtcdClientOnStderr(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args        []string
		wantClient  bool
		wantJSON    bool
		description string
	}{
		{[]string{"--log-level", "debug", "--log-format", "json", "etcd", "members"}, true, true, "debug json before the command"},
		{[]string{"etcd", "members", "--log-level", "debug", "--log-format", "json"}, true, true, "debug json after the command"},
		{[]string{"--log-level", "debug", "etcd", "members"}, true, false, "debug text"},
		{[]string{"etcd", "members"}, false, false, "default warn: no client chatter"},
	}
	for _, c := range cases {
		args := append(c.args, "--endpoints", "http://127.0.0.1:1", "--timeout", "1s")
		code, out, errs := hm(t, nil, args...)
		if code == 0 || out != "" {
			t.Errorf("%s: exit %d, stdout %q", c.description, code, out)
		}
		if got := strings.Contains(errs, "etcd-client"); got != c.wantClient {
			t.Errorf("%s: etcd client lines on stderr %v, want %v:\n%s", c.description, got, c.wantClient, errs)
		}
		if !c.wantJSON {
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
			if strings.HasPrefix(l, "hamaster: ") {
				continue // the error line for people
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] == nil {
				t.Errorf("%s: stderr line is not a JSON log record: %q", c.description, l)
			}
		}
	}
}
