package lbproxy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/errkind/errkindtest"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name    string
		json    string
		check   func(c Config) bool
		wantErr string
	}{
		{name: "spec example", json: `{"listen": "127.0.42.1:6443", "targets": [{"name": "demo-master-0", "address": "127.0.42.2:6443", "draining": false}],
			"health": {"path": "/readyz", "interval": "200ms", "timeout": "1s", "healthy_threshold": 1, "unhealthy_threshold": 2, "ca_file": "/path/ca.crt"},
			"status_file": "/tmp/s.json", "pid_file": "/tmp/lb.pid"}`,
			check: func(c Config) bool {
				return c.Listen == "127.0.42.1:6443" && len(c.Targets) == 1 && c.Targets[0].Name == "demo-master-0" &&
					c.Health.Interval.Duration == 200*time.Millisecond && c.Health.Timeout.Duration == time.Second &&
					c.StatusFile == "/tmp/s.json" && c.PIDFile == "/tmp/lb.pid"
			}},
		{name: "defaults", json: `{"listen": "127.0.42.1:6443", "health": {"ca_file": "/ca.crt"}}`,
			check: func(c Config) bool {
				h := c.Health
				return h.Path == "/readyz" && h.Interval.Duration == DefaultHealthInterval && h.Timeout.Duration == DefaultHealthTimeout &&
					h.HealthyThreshold == 1 && h.UnhealthyThreshold == 2 && len(c.Targets) == 0
			}},
		{name: "nanosecond number", json: `{"listen": "127.0.0.1:1", "health": {"ca_file": "/ca", "interval": 1000000}}`,
			check: func(c Config) bool { return c.Health.Interval.Duration == time.Millisecond }},
		{name: "bad listen", json: `{"listen": "lb:6443", "health": {"ca_file": "/ca"}}`, wantErr: `listen "lb:6443": want ip:port`},
		{name: "no listen", json: `{"health": {"ca_file": "/ca"}}`, wantErr: `listen "": want ip:port`},
		{name: "bad target address", json: `{"listen": "127.0.0.1:1", "targets": [{"name": "a", "address": "127.0.0.2"}], "health": {"ca_file": "/ca"}}`,
			wantErr: `targets[0].address "127.0.0.2": want ip:port`},
		{name: "unnamed target", json: `{"listen": "127.0.0.1:1", "targets": [{"address": "127.0.0.2:1"}], "health": {"ca_file": "/ca"}}`,
			wantErr: "targets[0].name is empty"},
		{name: "duplicate name", json: `{"listen": "127.0.0.1:1", "targets": [{"name": "a", "address": "127.0.0.2:1"}, {"name": "a", "address": "127.0.0.3:1"}], "health": {"ca_file": "/ca"}}`,
			wantErr: `targets[1].name "a" is listed twice`},
		{name: "target is listener", json: `{"listen": "127.0.0.1:1", "targets": [{"name": "a", "address": "127.0.0.1:1"}], "health": {"ca_file": "/ca"}}`,
			wantErr: "is the listen address itself"},
		{name: "bad duration", json: `{"listen": "127.0.0.1:1", "health": {"ca_file": "/ca", "interval": "often"}}`,
			wantErr: `duration "often": want a Go duration`},
		{name: "negative threshold", json: `{"listen": "127.0.0.1:1", "health": {"ca_file": "/ca", "unhealthy_threshold": -1}}`,
			wantErr: "must be at least 1"},
		{name: "relative path", json: `{"listen": "127.0.0.1:1", "health": {"ca_file": "/ca", "path": "readyz"}}`,
			wantErr: `health.path "readyz": want an absolute path`},
		{name: "no ca", json: `{"listen": "127.0.0.1:1"}`, wantErr: "health.ca_file is empty"},
		{name: "unknown field", json: `{"listen": "127.0.0.1:1", "health": {"ca_file": "/ca"}, "backends": []}`,
			wantErr: `unknown field "backends"`},
		{name: "not json", json: `listen: x`, wantErr: "invalid character"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, "cfg"+string(rune('a'+i))+".json")
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(path)
			if errkindtest.Want(t, err, tc.wantErr, errkind.InvalidArgument) {
				return
			}
			if !tc.check(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}

func TestWriteConfigRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lb.json")
	want := Config{
		Listen:  "127.0.42.1:6443",
		Targets: []Target{{Name: "m-0", Address: "127.0.42.2:6443"}, {Name: "m-1", Address: "127.0.42.3:6443", Draining: true}},
		Health: HealthConfig{Path: "/readyz", Interval: Duration{250 * time.Millisecond}, Timeout: Duration{time.Second},
			HealthyThreshold: 2, UnhealthyThreshold: 3, CAFile: "/ca.crt"},
		StatusFile: "/s.json",
	}
	if err := WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"interval": "250ms"`) {
		t.Errorf("durations not written as strings:\n%s", raw)
	}
	got, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if string(a) != string(b) {
		t.Errorf("round trip:\n got %s\nwant %s", a, b)
	}
}
