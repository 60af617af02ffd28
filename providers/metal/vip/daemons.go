package vip

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/errkind"
)

// The oldest daemons the rendered configuration works with.
//   - keepalived 2.1.0: the root keyword track_file and the instance
//     keyword check_unicast_src arrived in 2.1.0 (keepalived's ChangeLog;
//     2.0.x knows only vrrp_track_file and the global
//     vrrp_check_unicast_src, logs "Unknown keyword" for the new ones and
//     runs without them: no planned handoff, adverts from anyone heard).
//   - HAProxy 2.0: master-worker mode (-W) with "expose-fd listeners"
//     (seamless reloads) came in 1.8 and "option redispatch <interval>"
//     in 1.6; 2.0 is the oldest branch whose manual (2.0's
//     doc/configuration.txt) has every keyword haproxy.cfg uses, and the
//     oldest a distribution still ships that hamaster accepts. The tests
//     run 2.6 (Debian 12's).
var (
	MinKeepalived = version.MustParseGeneric("2.1.0")
	MinHAProxy    = version.MustParseGeneric("2.0.0")
)

// Daemons is what CheckDaemons found on a host: each daemon's absolute
// path (what the unit runs) and version.
type Daemons struct {
	KeepalivedPath, KeepalivedVersion string
	HAProxyPath, HAProxyVersion       string
}

// systemdPATH is systemd's default PATH for services (systemd.exec(5)),
// which a non-root login's PATH lacks the sbin directories of: the
// scripts that look for the daemons or run systemctl set it first.
const systemdPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// daemonsScript prints "daemon NAME PATH FIRST-LINE-OF-ITS-VERSION" for
// keepalived and haproxy ("daemon NAME -" when missing) and "systemctl
// PATH" (or "-"), looked up on systemdPATH.
const daemonsScript = `PATH=` + systemdPATH + `
for d in keepalived haproxy; do
  p=$(command -v $d) || { echo "daemon $d -"; continue; }
  case $d in keepalived) v=$("$p" --version 2>&1 | head -n 1);; *) v=$("$p" -v 2>&1 | head -n 1);; esac
  echo "daemon $d $p $v"
done
echo "systemctl $(command -v systemctl || echo -)"
`

var (
	// "Keepalived v2.2.7 (01/16,2022)"
	keepalivedVersionRE = regexp.MustCompile(`Keepalived v([0-9]+\.[0-9]+(\.[0-9]+)?)`)
	// "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"
	// (before 2.1: "HA-Proxy version 1.8.19 2019/02/11")
	haproxyVersionRE = regexp.MustCompile(`HA-?Proxy version ([0-9]+\.[0-9]+(\.[0-9]+)?)`)
)

// installHint is how an operator installs both daemons.
const installHint = "install the distribution's packages (Debian, Ubuntu: apt-get install keepalived haproxy; RHEL, Fedora: dnf install keepalived haproxy)"

// parseDaemons reads daemonsScript's output: the daemons found, and
// every problem (missing, too old, no systemd) named for host.
func parseDaemons(host string, out []byte) (Daemons, error) {
	var d Daemons
	var problems []string
	seen := map[string]bool{}
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "systemctl":
			seen["systemctl"] = true
			if f[1] == "-" {
				problems = append(problems, "systemctl not found: hamaster runs keepalived and HAProxy as systemd units ("+KeepalivedUnit+", "+HAProxyUnit+")")
			}
		case len(f) >= 3 && f[0] == "daemon":
			name, path := f[1], f[2]
			seen[name] = true
			if path == "-" {
				problems = append(problems, name+" not found")
				continue
			}
			re, min := keepalivedVersionRE, MinKeepalived
			if name == "haproxy" {
				re, min = haproxyVersionRE, MinHAProxy
			}
			line := strings.Join(f[3:], " ")
			m := re.FindStringSubmatch(line)
			var v *version.Version
			if m != nil {
				v, _ = version.ParseGeneric(m[1])
			}
			switch {
			case v == nil:
				problems = append(problems, fmt.Sprintf("%s (%s) reports no version hamaster can read: %q", name, path, line))
				continue
			case v.LessThan(min):
				problems = append(problems, fmt.Sprintf("%s %s (%s) is older than %s, which the rendered configuration needs", name, v, path, min))
				continue
			}
			if name == "haproxy" {
				d.HAProxyPath, d.HAProxyVersion = path, v.String()
			} else {
				d.KeepalivedPath, d.KeepalivedVersion = path, v.String()
			}
		}
	}
	for _, n := range []string{"keepalived", "haproxy", "systemctl"} {
		if !seen[n] {
			return d, fmt.Errorf("check the VIP's daemons on %s: no answer about %s in %q", host, n, out)
		}
	}
	if len(problems) > 0 {
		return d, errkind.Errorf(errkind.FailedPrecondition, "master %s cannot hold the VIP: %s; %s (keepalived ≥ %s, HAProxy ≥ %s, systemd), then run the command again",
			host, strings.Join(problems, "; "), installHint, MinKeepalived, MinHAProxy)
	}
	return d, nil
}

// CheckDaemons finds keepalived and HAProxy on h, in one session, and
// refuses (errkind.FailedPrecondition, naming the host, what was found
// and what is needed) a host that lacks either, has one older than the
// configuration needs (MinKeepalived, MinHAProxy), or runs no systemd.
// Nothing changes on h.
func CheckDaemons(ctx context.Context, h Host) (Daemons, error) {
	out, err := h.run(ctx, "check the VIP's daemons", daemonsScript)
	if err != nil {
		return Daemons{}, err
	}
	return parseDaemons(h.Name, out)
}
