package vip

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/remote"
)

// ProbeTable is the nftables table CheckVRRP counts adverts in, on each
// master, while it runs: one input chain after the host's own filters
// (priority 100: iptables' and firewalld's filter chains run before it),
// so an advert a host's firewall drops is not counted.
const ProbeTable = "hamaster_vrrp_probe"

// VRRPPeer is one master taking part in CheckVRRP.
type VRRPPeer struct {
	Host Host
	// Address is the master's IPv4 address: the source of its adverts
	// (keepalived's unicast_src_ip) and where the others send theirs.
	Address string
	// Keepalived is the binary that sends the adverts (CheckDaemons'
	// KeepalivedPath).
	Keepalived string
}

// probeSettle is how long a probing keepalived keeps advertising once it
// is MASTER: one advert interval (advert_int 1) after its first advert,
// then its priority-0 advert as it stops.
const probeSettle = time.Second

// CheckVRRP checks, before any keepalived of the VIP runs, that VRRP
// adverts (IP protocol 112, unicast, as the VIP's instance sends them)
// reach from every peer to every other: where they do not, each master
// takes the VIP (two holders). On every peer a counter per other peer's
// address is set up in ProbeTable; then, one peer at a time, keepalived
// runs a VRRP instance of routerID with no address (priority 255: it is
// MASTER at once and advertises; nothing is added to any interface) for
// one advert interval and stops; then the counters are read and the
// table removed. routerID is the VIP's own instance's (no one else's
// instance on these hosts may use it); the peers run nothing of the
// VIP's yet. errkind.FailedPrecondition names each pair whose adverts
// did not arrive. Nothing is left on the hosts, the error path included.
func CheckVRRP(ctx context.Context, routerID int, peers []VRRPPeer) error {
	if len(peers) < 2 {
		return nil
	}
	if routerID < 1 || routerID > 255 {
		return errkind.Errorf(errkind.InvalidArgument, "check VRRP between the masters: router id %d is not in 1..255", routerID)
	}
	for _, p := range peers {
		if a, err := netip.ParseAddr(p.Address); err != nil || !a.Is4() {
			return errkind.Errorf(errkind.InvalidArgument, "check VRRP from %s: %q is not an IPv4 address", p.Host.Name, p.Address)
		}
	}
	defer func() {
		// Bounded and detached: the table goes even when ctx has ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		onEach(peers, func(p VRRPPeer) ([]byte, error) {
			return p.Host.run(cctx, "remove the VRRP probe's counters", "nft delete table ip "+ProbeTable+" 2>/dev/null; true")
		})
	}()
	ifaces := onEach(peers, func(p VRRPPeer) ([]byte, error) {
		return p.Host.run(ctx, "count VRRP adverts", probeCountersScript(p.Address, peers))
	})
	if err := joinErrs(ifaces); err != nil {
		return err
	}
	for i, p := range peers {
		conf := probeConf(routerID, strings.TrimSpace(string(ifaces[i].v)), p.Address, peers)
		if _, err := p.Host.run(ctx, "send VRRP adverts", probeSendScript(p.Keepalived, conf)); err != nil {
			return errkind.Mark(errkind.FailedPrecondition, fmt.Errorf("check VRRP between the masters: %w", err))
		}
	}
	got := onEach(peers, func(p VRRPPeer) (map[string]int, error) {
		out, err := p.Host.run(ctx, "read the VRRP probe's counters", "nft list table ip "+ProbeTable)
		return parseProbeCounters(out), err
	})
	if err := joinErrs(got); err != nil {
		return err
	}
	var missing []string
	for r, to := range peers {
		for s, from := range peers {
			if s != r && got[r].v[from.Address] == 0 {
				missing = append(missing, fmt.Sprintf("%s (%s) → %s (%s)", from.Host.Name, from.Address, to.Host.Name, to.Address))
			}
		}
	}
	if len(missing) > 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "VRRP adverts (IP protocol 112, unicast) do not arrive: %s; each master would take the VIP. Allow IP protocol 112 between the masters' addresses in every master's firewall (e.g. nft add rule inet filter input ip protocol vrrp accept) and in the network between them, then run the command again",
			strings.Join(missing, ", "))
	}
	return nil
}

// probeCountersScript replaces ProbeTable on the host of address with a
// counter per other peer and prints the interface holding address.
func probeCountersScript(address string, peers []VRRPPeer) string {
	var rules strings.Builder
	for _, p := range peers {
		if p.Address != address {
			fmt.Fprintf(&rules, "    ip protocol vrrp ip saddr %s counter\n", p.Address)
		}
	}
	table := fmt.Sprintf("table ip %s {\n  chain input {\n    type filter hook input priority 100; policy accept;\n%s  }\n}\n", ProbeTable, rules.String())
	return fmt.Sprintf(`export PATH=%s
%s
nft delete table ip %s 2>/dev/null
printf '%%s' %s | nft -f - || exit 1
echo "$if"`, systemdPATH, ifaceScript(address), ProbeTable, remote.ShellQuote(table))
}

// probeConf is the probing instance: VRRPv2 (keepalived refuses a v3
// instance without addresses), priority 255 so that it is MASTER at once
// (RFC 3768 5.3.4: the address owner), unicast to the other peers, no
// virtual address.
func probeConf(routerID int, iface, address string, peers []VRRPPeer) string {
	var ps strings.Builder
	for _, p := range peers {
		if p.Address != address {
			fmt.Fprintf(&ps, "    %s\n", p.Address)
		}
	}
	return fmt.Sprintf(`global_defs {
  router_id hamaster_vrrp_probe
  vrrp_version 2
}
vrrp_instance hamaster_vrrp_probe {
  state MASTER
  interface %s
  virtual_router_id %d
  priority 255
  advert_int 1
  unicast_src_ip %s
  unicast_peer {
%s  }
}
`, iface, routerID, address, ps.String())
}

// probeSendScript runs keepalived with conf until it is MASTER (its
// first advert is sent on entering it), one advert interval more, then
// stops it (SIGTERM: a priority-0 advert). Its log is printed when it
// exits early or never becomes MASTER within 30 s.
func probeSendScript(keepalived, conf string) string {
	return fmt.Sprintf(`export PATH=%[1]s
d=$(mktemp -d /tmp/hamaster-vrrp-probe.XXXXXX) || exit 1
printf '%%s' %[2]s > "$d/keepalived.conf"
%[3]s --dont-fork --log-console --vrrp --use-file="$d/keepalived.conf" --pid="$d/keepalived.pid" --vrrp_pid="$d/vrrp.pid" > "$d/log" 2>&1 &
pid=$!
n=0
until grep -q "Entering MASTER STATE" "$d/log"; do
  if ! kill -0 $pid 2>/dev/null || [ $n -ge 300 ]; then
    kill $pid 2>/dev/null; wait $pid
    echo "keepalived did not become MASTER of the probing instance:" >&2; tail -n 20 "$d/log" >&2
    rm -rf "$d"; exit 4
  fi
  n=$((n+1)); sleep 0.1
done
sleep %[4]d
kill -TERM $pid; wait $pid
rm -rf "$d"`, systemdPATH, remote.ShellQuote(conf), remote.ShellQuote(keepalived), int(probeSettle/time.Second))
}

// probeCounterRE matches a counter of `nft list table`:
// "ip protocol vrrp ip saddr 10.0.0.2 counter packets 3 bytes 108".
var probeCounterRE = regexp.MustCompile(`ip saddr ([0-9.]+) counter packets ([0-9]+)`)

// parseProbeCounters maps each source address to the adverts counted.
func parseProbeCounters(out []byte) map[string]int {
	m := map[string]int{}
	for _, s := range probeCounterRE.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(s[2])
		m[s[1]] += n
	}
	return m
}
