package lbproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
)

// Defaults for health settings left zero.
const (
	DefaultHealthPath         = "/readyz"
	DefaultHealthInterval     = 200 * time.Millisecond
	DefaultHealthTimeout      = time.Second
	DefaultHealthyThreshold   = 1
	DefaultUnhealthyThreshold = 2
)

// Config is the load balancer's configuration file.
type Config struct {
	// Listen is the frontend, the "static IP": ip:port.
	Listen string `json:"listen"`
	// Targets are the backends, e.g. the replicas' apiservers.
	Targets []Target `json:"targets"`
	// Health says how targets are checked.
	Health HealthConfig `json:"health"`
	// NoDialRetry makes the proxy behave as a cloud's pass-through LB
	// (GCE's network LB, AWS's NLB): a new connection goes to one healthy
	// target, and if that target refuses it (its VM is down but the
	// checks have not marked it unhealthy yet) the client's connection
	// fails; nothing tries another target. False (the default) tries the
	// other healthy targets in turn.
	NoDialRetry bool `json:"no_dial_retry,omitempty"`
	// TerminateRemoved closes the open connections of a target when a
	// reload removes it, as an AWS NLB does at the end of a target's
	// deregistration delay with connection termination on
	// (deregistration_delay.connection_termination.enabled). False (the
	// default) lets them run until either side closes them.
	TerminateRemoved bool `json:"terminate_removed,omitempty"`
	// StatusFile, if set, receives the JSON Status after every check round.
	StatusFile string `json:"status_file,omitempty"`
	// PIDFile, if set, holds the pid while the listener is bound.
	PIDFile string `json:"pid_file,omitempty"`
}

// Target is one backend.
type Target struct {
	// Name identifies the target, e.g. the replica "demo-master-0".
	Name string `json:"name"`
	// Address is ip:port; the ip is also the TLS ServerName of health checks.
	Address string `json:"address"`
	// Draining targets get no new connections; existing ones continue.
	Draining bool `json:"draining"`
	// ProbeBlocked, when set, says why the health checks cannot reach the
	// target (a cloud firewall dropping the probes' source ranges): every
	// check fails with it, as a cloud LB's would, and the target is never
	// healthy.
	ProbeBlocked string `json:"probe_blocked,omitempty"`
}

// HealthConfig configures the HTTPS health checks.
type HealthConfig struct {
	// Path is checked with GET; 200 is healthy. Default /readyz.
	Path string `json:"path,omitempty"`
	// Interval between check rounds. Default 200ms.
	Interval Duration `json:"interval,omitzero"`
	// Timeout of one check (and of dialing a target). Default 1s.
	Timeout Duration `json:"timeout,omitzero"`
	// HealthyThreshold consecutive successes make a target healthy. Default 1.
	HealthyThreshold int `json:"healthy_threshold,omitempty"`
	// UnhealthyThreshold consecutive failures make a target unhealthy. Default 2.
	UnhealthyThreshold int `json:"unhealthy_threshold,omitempty"`
	// CAFile is the PEM CA that signed the targets' serving certificates.
	CAFile string `json:"ca_file"`
	// ServerName is the name checks verify the targets' certificates
	// for (default: each target's IP). A kube-up master's MASTER_CERT
	// names the static IP and kubernetes.*, not the master's internal
	// address, so the GCE fake checks them as "kubernetes".
	ServerName string `json:"server_name,omitempty"`
}

// Duration is a time.Duration written in JSON as a string ("200ms"); a
// number is read as nanoseconds.
type Duration struct{ time.Duration }

// MarshalJSON writes d as a string such as "200ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "200ms" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ns int64
		if err2 := json.Unmarshal(b, &ns); err2 != nil {
			return fmt.Errorf("duration: want a string such as \"200ms\", got %s", b)
		}
		d.Duration = time.Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as \"200ms\"", s)
	}
	d.Duration = v
	return nil
}

// withDefaults fills zero health settings.
func (c Config) withDefaults() Config {
	h := &c.Health
	if h.Path == "" {
		h.Path = DefaultHealthPath
	}
	if h.Interval.Duration == 0 {
		h.Interval.Duration = DefaultHealthInterval
	}
	if h.Timeout.Duration == 0 {
		h.Timeout.Duration = DefaultHealthTimeout
	}
	if h.HealthyThreshold == 0 {
		h.HealthyThreshold = DefaultHealthyThreshold
	}
	if h.UnhealthyThreshold == 0 {
		h.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	c.Targets = append([]Target(nil), c.Targets...)
	return c
}

// Validate checks c (after defaults). Errors are of kind
// errkind.InvalidArgument and name the field.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, format, args...)
	}
	if err := checkIPPort("listen", c.Listen); err != nil {
		return err
	}
	names := map[string]bool{}
	addrs := map[string]bool{}
	for i, t := range c.Targets {
		field := fmt.Sprintf("targets[%d]", i)
		if t.Name == "" {
			return bad("%s.name is empty: want the replica's name", field)
		}
		if names[t.Name] {
			return bad("%s.name %q is listed twice: names must be unique", field, t.Name)
		}
		names[t.Name] = true
		if err := checkIPPort(field+".address", t.Address); err != nil {
			return err
		}
		if addrs[t.Address] {
			return bad("%s.address %q is listed twice", field, t.Address)
		}
		addrs[t.Address] = true
		if t.Address == c.Listen {
			return bad("%s.address %q is the listen address itself", field, t.Address)
		}
	}
	h := c.Health
	if !strings.HasPrefix(h.Path, "/") {
		return bad("health.path %q: want an absolute path such as /readyz", h.Path)
	}
	if h.Interval.Duration <= 0 || h.Timeout.Duration <= 0 {
		return bad("health.interval %v and health.timeout %v must be positive (e.g. \"200ms\", \"1s\")", h.Interval, h.Timeout)
	}
	if h.HealthyThreshold < 1 || h.UnhealthyThreshold < 1 {
		return bad("health.healthy_threshold %d and health.unhealthy_threshold %d must be at least 1", h.HealthyThreshold, h.UnhealthyThreshold)
	}
	if h.CAFile == "" {
		return bad("health.ca_file is empty: want the PEM CA that signed the targets' certificates")
	}
	return nil
}

func checkIPPort(field, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil || net.ParseIP(host) == nil || port == "" {
		return errkind.Errorf(errkind.InvalidArgument, "%s %q: want ip:port such as 127.0.42.1:6443", field, v)
	}
	return nil
}

// LoadConfig reads a config file, fills defaults and validates it.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "lb config: %w", err)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "lb config %s: %w", path, err)
	}
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("lb config %s: %w", path, err)
	}
	return c, nil
}

// WriteConfig writes cfg atomically (a temporary file renamed over path),
// so a running proxy never reads half a file.
func WriteConfig(path string, cfg Config) error {
	if err := fsutil.ReplaceJSON(path, cfg, 0o644); err != nil {
		return fmt.Errorf("write lb config: %w", err)
	}
	return nil
}
