package vip

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

func TestParseDaemons(t *testing.T) {
	t.Parallel()
	const (
		debian12   = "daemon keepalived /usr/sbin/keepalived Keepalived v2.2.7 (01/16,2022)\ndaemon haproxy /usr/sbin/haproxy HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nsystemctl /usr/bin/systemctl\n"
		osixia     = "daemon keepalived /usr/local/sbin/keepalived Keepalived v2.0.20 (01/22,2020)\ndaemon haproxy /usr/sbin/haproxy HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nsystemctl /usr/bin/systemctl\n"
		haproxy18  = "daemon keepalived /usr/sbin/keepalived Keepalived v2.2.7 (01/16,2022)\ndaemon haproxy /usr/sbin/haproxy HA-Proxy version 1.8.19-1+deb10u3 2020/08/01\nsystemctl /usr/bin/systemctl\n"
		missing    = "daemon keepalived -\ndaemon haproxy -\nsystemctl -\n"
		unreadable = "daemon keepalived /opt/k Keepalived\ndaemon haproxy /usr/sbin/haproxy HAProxy version 2.6.12\nsystemctl /usr/bin/systemctl\n"
	)
	for _, c := range []struct {
		name, out string
		want      Daemons
		errs      []string
	}{
		{"debian 12", debian12, Daemons{"/usr/sbin/keepalived", "2.2.7", "/usr/sbin/haproxy", "2.6.12"}, nil},
		{"keepalived 2.0.20 (the doc's image)", osixia, Daemons{}, []string{"master cp-1", "keepalived 2.0.20 (/usr/local/sbin/keepalived) is older than 2.1.0", "apt-get install keepalived haproxy"}},
		{"haproxy 1.8", haproxy18, Daemons{}, []string{"haproxy 1.8.19 (/usr/sbin/haproxy) is older than 2.0.0"}},
		{"nothing installed", missing, Daemons{}, []string{"keepalived not found", "haproxy not found", "systemctl not found"}},
		{"no version", unreadable, Daemons{}, []string{`keepalived (/opt/k) reports no version hamaster can read: "Keepalived"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, err := parseDaemons("cp-1", []byte(c.out))
			if c.errs == nil {
				if err != nil || d != c.want {
					t.Fatalf("parseDaemons = %+v, %v; want %+v", d, err, c.want)
				}
				return
			}
			if !errors.Is(err, errkind.FailedPrecondition) {
				t.Fatalf("parseDaemons = %v; want FailedPrecondition", err)
			}
			for _, w := range c.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
	if _, err := parseDaemons("cp-1", []byte("daemon keepalived -\n")); err == nil || errors.Is(err, errkind.FailedPrecondition) {
		t.Errorf("a cut-short answer: %v; want an error that is not a refusal", err)
	}
}

// daemonsScript on this machine (make test's prerequisites install
// Debian's keepalived and haproxy) finds both, at versions it accepts.
func TestDaemonsScriptHere(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "sh", "-c", strings.Replace(daemonsScript, "echo \"systemctl $(command -v systemctl || echo -)\"", "echo systemctl /stand-in", 1)).Output()
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDaemons("here", out)
	if err != nil || d.KeepalivedPath != DefaultKeepalivedPath || d.HAProxyPath != DefaultHAProxyPath {
		t.Fatalf("parseDaemons(%q) = %+v, %v", out, d, err)
	}
}
