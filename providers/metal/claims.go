package metal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hamaster/hamaster/internal/fsutil"
)

// The hosts this cluster reserved or claimed, kept in the state
// directory (<state-dir>/<cluster>/metal-hosts.json) as well as on the
// hosts: a claimed host that stops answering is still this cluster's
// master (listed as stopped), where an unreachable host with no record
// cannot be told from a free one.
func (p *Provider) claimsFile() string { return filepath.Join(p.stateDir, "metal-hosts.json") }

type claims struct {
	Hosts []string `json:"hosts"`
}

// loadClaims is the set of hosts recorded as this cluster's.
func (p *Provider) loadClaims() (map[string]bool, error) {
	b, err := os.ReadFile(p.claimsFile())
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.claimsFile(), err)
	}
	var c claims
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read %s: %w", p.claimsFile(), err)
	}
	out := map[string]bool{}
	for _, h := range c.Hosts {
		out[h] = true
	}
	return out, nil
}

// recordClaim adds host to (or, with on false, removes it from) the
// record. Idempotent.
func (p *Provider) recordClaim(host string, on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	known, err := p.loadClaims()
	if err != nil {
		return err
	}
	if known[host] == on {
		return nil
	}
	if on {
		known[host] = true
	} else {
		delete(known, host)
	}
	c := claims{}
	for h := range known {
		c.Hosts = append(c.Hosts, h)
	}
	slices.Sort(c.Hosts)
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := fsutil.WriteFileAtomic(p.claimsFile(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", p.claimsFile(), err)
	}
	return nil
}
