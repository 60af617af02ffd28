package vip

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/remote"
)

// Executor runs shell commands on one host and writes files there
// atomically (a temporary file renamed over the path). *remote.Client
// satisfies it.
type Executor interface {
	Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error)
	Upload(ctx context.Context, path string, data []byte, mode os.FileMode) error
}

// Host is one master reached through an Executor. Every operation on it is
// idempotent and its errors name the host (and the file).
type Host struct {
	// Name is the master's name, as in Config.Masters.
	Name string
	Exec Executor
	// Log receives what the operations change (nil: discarded).
	Log *slog.Logger
}

func (h Host) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log.With("host", h.Name)
}

// run runs cmd on h; what names the action in errors.
func (h Host) run(ctx context.Context, what, cmd string) ([]byte, error) {
	out, _, err := h.Exec.Run(ctx, cmd)
	if err != nil {
		return out, fmt.Errorf("%s on %s: %w", what, h.Name, err)
	}
	return out, nil
}

// Applied says what Apply changed.
type Applied struct {
	// Interface is the one carrying the VIP (found on the host when the
	// config left it empty).
	Interface string
	// Written are the files that differed and were replaced.
	Written []string
	// Reloaded are the running daemons told to reload ("keepalived",
	// "haproxy"); a daemon not running is left to the kubelet.
	Reloaded []string
}

// CheckPrefix checks that vip lies inside the prefix of the interface
// holding address on h: keepalived adds the VIP to that interface, and a
// VIP outside its subnet is held but reached by nobody (neighbours do not
// ARP for it there). errkind.InvalidArgument names the host, the
// interface and its prefix.
func CheckPrefix(ctx context.Context, h Host, address, vip string) error {
	v, err := netip.ParseAddr(vip)
	if err != nil || !v.Is4() {
		return errkind.Errorf(errkind.InvalidArgument, "the vip %q is not an IPv4 address", vip)
	}
	if _, err := netip.ParseAddr(address); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "check the vip on %s: %q is not an IP address", h.Name, address)
	}
	out, err := h.run(ctx, "find the prefix of "+address, "ip -o -4 addr show to "+remote.ShellQuote(address+"/32"))
	if err != nil {
		return err
	}
	for l := range strings.Lines(string(out)) {
		// "2: eth0    inet 198.18.6.1/24 brd 198.18.6.255 scope global eth0"
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "inet" {
			continue
		}
		pfx, err := netip.ParsePrefix(f[3])
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(f[1], "@")
		if !pfx.Masked().Contains(v) {
			return errkind.Errorf(errkind.InvalidArgument, "the vip %s is outside %s's subnet: %s holds %s on %s (%s); choose a free address in %s (the inventory's vip, or --vip)",
				vip, h.Name, h.Name, address, name, pfx, pfx.Masked())
		}
		if v == pfx.Addr() {
			return errkind.Errorf(errkind.InvalidArgument, "the vip %s is %s's own address on %s", vip, h.Name, name)
		}
		return nil
	}
	return errkind.Errorf(errkind.NotFound, "check the vip on %s: no interface holds %s", h.Name, address)
}

// dadWait is how long CheckUnused waits for an answer to its ARP request
// for the VIP: a live neighbour on the segment answers in milliseconds;
// the kernel sends its next probe only after a second.
const dadWait = 2 * time.Second

// CheckUnused checks that nobody answers ARP for vip on the segment of the
// interface holding address on h (duplicate address detection, as
// RFC 5227's probe: ask, and see whether an owner answers), in one session:
// the kernel's neighbour entry for vip on that interface is flushed, a
// connection to vip makes the kernel ask for it, and an entry that then
// has a link-layer address is an answer. h itself carrying vip (a create
// resumed after its keepalived took it) is not a conflict.
// errkind.FailedPrecondition names the host, the interface and the MAC
// that answered.
func CheckUnused(ctx context.Context, h Host, address, vip string) error {
	if _, err := netip.ParseAddr(address); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "check that the vip is free on %s: %q is not an IP address", h.Name, address)
	}
	v, err := netip.ParseAddr(vip)
	if err != nil || !v.Is4() {
		return errkind.Errorf(errkind.InvalidArgument, "the vip %q is not an IPv4 address", vip)
	}
	// curl is on every master already (keepalived's check uses it); port
	// 9 (discard) is as good as any: only the ARP request matters.
	script := ifaceScript(address) + fmt.Sprintf(`
echo "if $if"
if ip -o -4 addr show | grep -qF ' %[1]s/'; then echo held; exit 0; fi
ip neigh flush to %[1]s dev "$if" 2>/dev/null || true
curl --silent --output /dev/null --connect-timeout %[2]d http://%[1]s:9/ 2>/dev/null || true
ip -4 neigh show to %[1]s dev "$if"`, v, int(dadWait/time.Second))
	out, err := h.run(ctx, "check that the vip "+vip+" is free", script)
	if err != nil {
		return err
	}
	var iface string
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "if":
			iface = f[1]
		case len(f) == 1 && f[0] == "held":
			return nil
		default:
			// "198.18.6.100 lladdr 02:..:01 REACHABLE"
			if i := slices.Index(f, "lladdr"); i >= 0 && i+1 < len(f) {
				return errkind.Errorf(errkind.FailedPrecondition, "the vip %s is already in use: on %s's %s, %s answers ARP for it; choose a free address in the masters' subnet (the inventory's vip, or --vip), or stop whatever holds it",
					vip, h.Name, iface, f[i+1])
			}
		}
	}
	return nil
}

// Apply makes h's files those rendered from cfg and the daemons run
// them. In one session it finds the interface (when cfg.Interface is
// empty), keepalived and HAProxy (CheckDaemons: a host without them, or
// with one too old, is refused before anything changes on it; when
// cfg's paths are empty, the units run the ones found) and the mode and
// content of each file, and whether the units are active. Then, in a
// second session and only when something differs or a unit is not
// active: each differing file replaced atomically,
// configuration before units; the static pods of earlier releases
// removed (their kubelet stops them); a running daemon whose
// configuration changed told to reload — keepalived by SIGHUP (its VRRP
// instance keeps its state: the VIP stays), HAProxy by SIGUSR2 to its
// master (a new worker takes the listening sockets, the old one
// finishes its connections); and both units enabled and started
// (systemctl enable --now: a no-op for a running one). A configuration
// change never restarts a daemon (a restarted keepalived on the holder
// moves the VIP). Re-running with the same cfg changes nothing.
func Apply(ctx context.Context, h Host, cfg Config) (Applied, error) {
	findPaths := cfg.KeepalivedPath == "" || cfg.HAProxyPath == ""
	cfg, err := cfg.Validate()
	if err != nil {
		return Applied{}, err
	}
	var b strings.Builder
	b.WriteString(daemonsScript)
	if cfg.Interface == "" {
		b.WriteString("echo iface $(ip -o -4 addr show to " + remote.ShellQuote(cfg.self().Address+"/32") + ")\n")
	}
	// Whether the units run: a run that died between writing the files
	// and starting the units left files that match and units that do not
	// run; a re-run must start them.
	b.WriteString("for u in " + KeepalivedUnit + " " + HAProxyUnit + "; do echo \"unit $u $(systemctl is-active $u 2>/dev/null)\"; done\n")
	paths := []string{KeepalivedConfPath, CheckScriptPath, NotifyScriptPath, HAProxyCfgPath, KeepalivedUnitPath, HAProxyUnitPath}
	b.WriteString(sumsScript(paths))
	out, err := h.run(ctx, "read the vip files", b.String())
	if err != nil {
		return Applied{}, err
	}
	d, err := parseDaemons(h.Name, out)
	if err != nil {
		return Applied{}, err
	}
	if findPaths {
		cfg.KeepalivedPath, cfg.HAProxyPath = d.KeepalivedPath, d.HAProxyPath
	}
	if cfg.Interface == "" {
		for l := range strings.Lines(string(out)) {
			// "iface 2: eth0    inet 198.18.6.1/24 ..."
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "iface" {
				cfg.Interface, _, _ = strings.Cut(f[2], "@")
			}
		}
		if cfg.Interface == "" {
			return Applied{}, errkind.Errorf(errkind.NotFound, "apply vip config: find the interface of %s on %s: no interface holds it", cfg.self().Address, h.Name)
		}
	}
	files, err := Render(cfg)
	if err != nil {
		return Applied{}, err
	}
	res := Applied{Interface: cfg.Interface}
	have := parseSums(out)
	// Every changed file in one session, each written atomically, then
	// the daemons reloaded or started.
	var script []string
	for _, f := range files.All() {
		if have[f.Path] == sum(f) {
			continue
		}
		script = append(script, remote.WriteFileScript(f.Path, f.Data, f.Mode))
		res.Written = append(res.Written, f.Path)
	}
	if len(script) == 0 && have[legacyManifests[0]] == "" && have[legacyManifests[1]] == "" && unitsActive(out) {
		return res, nil
	}
	script = append(script, "rm -f "+strings.Join(legacyManifests, " "))
	if slices.Contains(res.Written, KeepalivedUnitPath) || slices.Contains(res.Written, HAProxyUnitPath) {
		script = append(script, "systemctl daemon-reload")
	}
	for _, dm := range []struct {
		name, conf, pidfile, signal string
	}{
		{"keepalived", KeepalivedConfPath, KeepalivedPidPath, "HUP"},
		{"haproxy", HAProxyCfgPath, HAProxyPidPath, "USR2"},
	} {
		if slices.Contains(res.Written, dm.conf) {
			script = append(script, "{ "+signalScript(dm.name, dm.pidfile, dm.signal)+"; }")
		}
	}
	script = append(script, "systemctl enable --now "+KeepalivedUnit+" "+HAProxyUnit)
	what := "start the vip's daemons"
	if len(res.Written) > 0 {
		what = "write " + strings.Join(res.Written, ", ")
	}
	out, err = h.run(ctx, what, strings.Join(script, " &&\n"))
	for _, p := range res.Written {
		h.log().Info("vip: wrote", "file", p)
	}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "signalled" {
			h.log().Info("vip: reloaded", "daemon", f[1])
			res.Reloaded = append(res.Reloaded, f[1])
		}
	}
	return res, err
}

// sum is a file's mode and content as sumsScript reports them: "644
// <sha256 hex>".
func sum(f File) string {
	return fmt.Sprintf("%o %x", f.Mode.Perm(), sha256.Sum256(f.Data))
}

// sumsScript creates the VIP's directories and prints "PATH MODE SHA256"
// for each of paths that exists (and for the legacy manifests), for
// parseSums; every session on a real host runs its login's shell setup
// first (a second is common), so Apply reads them in the session that
// checks the daemons.
func sumsScript(paths []string) string {
	var b strings.Builder
	b.WriteString("mkdir -p " + strings.Join([]string{ConfigDir, RunDir}, " ") + " || exit 1\n")
	for _, p := range append(slices.Clone(paths), legacyManifests...) {
		q := remote.ShellQuote(p)
		fmt.Fprintf(&b, "[ -f %[1]s ] && printf '%%s %%s %%s\\n' %[1]s \"$(stat -c %%a %[1]s)\" \"$(sha256sum < %[1]s | cut -d' ' -f1)\"\n", q)
	}
	b.WriteString("exit 0")
	return b.String()
}

// unitsActive reports whether Apply's read found both units active
// ("unit NAME active" lines).
func unitsActive(out []byte) bool {
	n := 0
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "unit" && f[2] == "active" {
			n++
		}
	}
	return n == 2
}

// parseSums reads sumsScript's lines; a missing file has no entry.
func parseSums(out []byte) map[string]string {
	have := map[string]string{}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[0], "/") {
			have[f[0]] = f[1] + " " + f[2]
		}
	}
	return have
}

// signalScript sends sig to the process named in pidfile when it is
// running and its name is comm (a stale pid file names someone else),
// printing "signalled COMM" when it did. It fails only when the process
// is still there and the signal failed: one gone between the check and
// the signal has nothing left to reload.
func signalScript(comm, pidfile, sig string) string {
	return fmt.Sprintf(`pid=$(cat %[1]s 2>/dev/null); if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = %[2]s ]; then if kill -%[3]s "$pid" 2>/dev/null; then echo signalled %[2]s; elif [ -d /proc/"$pid" ]; then echo "could not send SIG%[3]s to %[2]s (pid $pid)" >&2; false; fi; fi`,
		remote.ShellQuote(pidfile), remote.ShellQuote(comm), sig)
}

// Remove takes the VIP's configuration off h: the units stopped and
// disabled (systemctl disable --now: SIGTERM, keepalived gives the VIP
// up with a priority-0 advert) and removed, with the static pods'
// manifests of earlier releases; then any daemon the pid files still
// name is stopped and awaited, the VIP deleted from any interface still
// carrying it, and the configuration, check script, maintenance file and
// RunDir removed.
// Hand the VIP off first (Handoff) for a move without a gap. Removing
// what is not there is success.
func Remove(ctx context.Context, h Host, vip string) error {
	if _, err := netip.ParseAddr(vip); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "remove vip from %s: %q is not an IP address", h.Name, vip)
	}
	// One session (every session on a real host runs its login's shell
	// setup first): the units and manifests, then each daemon stopped and
	// awaited (stopWait; a stale pid file names someone else), the VIP,
	// the drop rule and the files.
	var b strings.Builder
	fmt.Fprintf(&b, `PATH=`+systemdPATH+`
units=
for u in %[1]s %[2]s; do [ -f %[3]s/"$u" ] && units="$units $u"; done
if [ -n "$units" ]; then
  systemctl disable --now $units || exit 1
  for u in $units; do rm -f %[3]s/"$u"; done
  systemctl daemon-reload || exit 1
fi
rm -f %[4]s || exit 1
`, KeepalivedUnit, HAProxyUnit, UnitDir, strings.Join(legacyManifests, " "))
	for _, d := range []struct{ name, pidfile string }{{"keepalived", KeepalivedPidPath}, {"haproxy", HAProxyPidPath}} {
		fmt.Fprintf(&b, `pid=$(cat %[1]s 2>/dev/null) && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = %[2]s ] && {
  kill -TERM "$pid" 2>/dev/null
  i=0
  while [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = %[2]s ]; do
    i=$((i+1)); [ $i -le %[3]d ] || { echo "%[2]s (pid $pid) still runs %[4]s after SIGTERM" >&2; exit 1; }
    sleep 0.1
  done
}
`, remote.ShellQuote(d.pidfile), remote.ShellQuote(d.name), int(stopWait/(100*time.Millisecond)), stopWait)
	}
	fmt.Fprintf(&b, `ip -o -4 addr show | while read -r _ dev _ addr _; do
  [ "${addr%%/*}" = %s ] && ip addr del "$addr" dev "$dev"
done
if command -v nft >/dev/null 2>&1 && nft list table inet %s >/dev/null 2>&1; then nft delete table inet %s || exit 1; fi
rm -rf %s`, remote.ShellQuote(vip), SynDropTable, SynDropTable, strings.Join([]string{ConfigDir, RunDir}, " "))
	if _, err := h.run(ctx, "remove the vip", b.String()); err != nil {
		return fmt.Errorf("remove vip from %s: %w", h.Name, err)
	}
	h.log().Info("vip: removed")
	return nil
}

// stopWait bounds Remove's wait for a daemon to exit after SIGTERM
// (keepalived sends its priority-0 advert and removes the VIP first).
const stopWait = 15 * time.Second

// Holder reports whether h carries vip on any interface ("ip -o addr
// show").
func Holder(ctx context.Context, h Host, vip string) (bool, error) {
	out, err := h.run(ctx, "list addresses", "ip -o addr show")
	if err != nil {
		return false, err
	}
	return bytes.Contains(out, []byte(" "+vip+"/")), nil
}

// State is the VRRP state h's keepalived last entered (MASTER, BACKUP,
// FAULT, STOP: StatePath, written by its notify script), "" when it has
// recorded none.
func State(ctx context.Context, h Host) (string, error) {
	out, err := h.run(ctx, "read the vrrp state", "cat "+StatePath+" 2>/dev/null || true")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// peerReadyWait bounds Handoff's wait for a peer in BACKUP: polls of a
// session each (all peers at once), several even where every session
// takes 2 s to start.
const peerReadyWait = 15 * time.Second

// waitPeerReady waits until one of peers' keepalived is in BACKUP (it
// takes the VIP at once on the holder's priority-0 advert; a peer still
// in FAULT or just started misses it and takes the VIP only after its
// master-down timer, ~2 s with the VIP held by nobody: seen on the lab
// right after an AddTarget). After peerReadyWait it gives up and says so:
// the handoff goes on as before.
func waitPeerReady(ctx context.Context, h Host, peers []Host) {
	wctx, cancel := context.WithTimeout(ctx, peerReadyWait)
	defer cancel()
	var states []string
	err := wait.Until(wctx, 100*time.Millisecond, "a peer of "+h.Name+" in BACKUP", func() (bool, error) {
		got := onEach(peers, func(p Host) (string, error) { return State(wctx, p) })
		states = states[:0]
		ready := false
		for i, p := range peers {
			st := got[i].v
			if got[i].err != nil {
				st = "unreachable"
			}
			states = append(states, p.Name+"="+st)
			ready = ready || st == "BACKUP"
		}
		return ready, nil
	})
	if err != nil && ctx.Err() == nil {
		h.log().Warn("vip: no peer is in BACKUP; handing off all the same (the VIP may be held by nobody for a peer's master-down timer)", "peers", states)
	}
}

// result is one host's answer in onEach.
type result[T any] struct {
	v   T
	err error
}

// onEach runs fn on every host (or peer) at once and returns their
// answers in the hosts' order: a poll of n hosts takes one session's time,
// not n (on a real host every session starts with the login's shell
// setup).
func onEach[H, T any](hosts []H, fn func(H) (T, error)) []result[T] {
	out := make([]result[T], len(hosts))
	var wg sync.WaitGroup
	for i, x := range hosts {
		wg.Go(func() {
			v, err := fn(x)
			out[i] = result[T]{v, err}
		})
	}
	wg.Wait()
	return out
}

// joinErrs joins the errors of rs.
func joinErrs[T any](rs []result[T]) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}

// ifaceScript sets the shell variable if to the interface holding the
// IPv4 address (the kernel's name, without a veth's @peer), failing with
// exit 3 when none does.
func ifaceScript(address string) string {
	return fmt.Sprintf(`if=$(ip -o -4 addr show to %s | awk '{sub("@.*","",$2); print $2; exit}')
[ -n "$if" ] || { echo "no interface holds %s" >&2; exit 3; }`, remote.ShellQuote(address+"/32"), address)
}

// runtime sends one command to HAProxy's admin socket on h (curl's
// telnet over the unix socket: curl is there for the check script) and
// returns the answer; HAProxy not running is errkind.Unavailable.
func runtime(ctx context.Context, h Host, command string) ([]byte, error) {
	out, err := h.run(ctx, "haproxy "+strings.Fields(command)[0], fmt.Sprintf("[ -S %[1]s ] || { echo 'no socket %[1]s' >&2; exit 3; }\nprintf '%%s\\n' %[2]s | curl --silent --show-error --max-time 5 --unix-socket %[1]s telnet://localhost",
		HAProxySocketPath, remote.ShellQuote(command)))
	if err != nil {
		return nil, errkind.Mark(errkind.Unavailable, fmt.Errorf("haproxy's admin socket %s: %w", HAProxySocketPath, err))
	}
	return out, nil
}

// Status is HAProxy's view on h of each apiserver ("show stat"): healthy
// when its check passes (UP, or DRAIN with a passing check), draining
// when it takes no new connection, with HAProxy's status and last check
// as the reason.
func Status(ctx context.Context, h Host) ([]lb.TargetHealth, error) {
	out, err := runtime(ctx, h, "show stat")
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(out, []byte("# "))))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("haproxy show stat on %s: unreadable answer %q: %v", h.Name, out, err)
	}
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	for _, c := range []string{"pxname", "svname", "status", "weight", "addr", "check_status"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("haproxy show stat on %s: no column %s", h.Name, c)
		}
	}
	var ts []lb.TargetHealth
	for _, row := range rows[1:] {
		if len(row) < len(rows[0])-1 || row[col["pxname"]] != BackendName || row[col["svname"]] == "BACKEND" || row[col["svname"]] == "FRONTEND" {
			continue
		}
		st := row[col["status"]]
		ts = append(ts, lb.TargetHealth{
			Name: row[col["svname"]], Address: row[col["addr"]],
			Healthy:  strings.HasPrefix(st, "UP") || st == "DRAIN",
			Draining: st == "DRAIN" || row[col["weight"]] == "0",
			Reason:   strings.TrimSpace(st + " " + row[col["check_status"]]),
		})
	}
	return ts, nil
}

// Drain stops HAProxy on h from sending new connections to master name
// ("set server apiserver/NAME state drain"); open ones go on. Its effect
// lasts until Ready or a reload: put the name in Config.Drained and Apply
// to keep it across reloads.
func Drain(ctx context.Context, h Host, name string) error {
	return setState(ctx, h, name, "drain")
}

// EndSessions closes, on h's HAProxy, every connection still open to
// master name ("shutdown sessions server apiserver/NAME"): what ends a
// drain once its grace period is over (lb.SessionEnder). A kept-alive
// client then reconnects to another apiserver; an idle HTTP/1.1
// connection closed this way is retried by the client without an error.
func EndSessions(ctx context.Context, h Host, name string) error {
	return serverCommand(ctx, h, name, "shutdown sessions server %s/%s", "end the sessions of "+name)
}

// Ready undoes Drain.
func Ready(ctx context.Context, h Host, name string) error {
	return setState(ctx, h, name, "ready")
}

func setState(ctx context.Context, h Host, name, state string) error {
	return serverCommand(ctx, h, name, "set server %s/%s state "+state, "set "+name+" "+state)
}

// serverCommand runs format (its two %s: the backend and name) on h's
// HAProxy admin socket; what names the action in errors and the log.
func serverCommand(ctx context.Context, h Host, name, format, what string) error {
	if !labelRE.MatchString(name) {
		return errkind.Errorf(errkind.InvalidArgument, "%s on %s: not a master's name", what, h.Name)
	}
	out, err := runtime(ctx, h, fmt.Sprintf(format, BackendName, name))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if msg := strings.TrimSpace(string(out)); msg != "" {
		kind := errkind.FailedPrecondition
		if strings.Contains(msg, "No such") {
			kind = errkind.NotFound
		}
		return errkind.Errorf(kind, "%s on %s: haproxy says %q", what, h.Name, msg)
	}
	h.log().Info("vip: haproxy: "+what, "server", name)
	return nil
}

// ErrNoOtherHolder is Handoff's error when no other host took the VIP.
var ErrNoOtherHolder = errors.New("no other master took the VIP")

// Handoff makes h give up vip before hamaster stops its apiserver (remove,
// upgrade, certificate rotation): it writes "1" to the maintenance file,
// which keepalived reads on change and which puts h's VRRP instance into
// FAULT (it sends a priority-0 advert and drops the VIP; it will not take
// the VIP while the file says 1), then waits until h no longer holds the
// VIP and one of peers does (ctx bounds the wait; ErrNoOtherHolder,
// errkind.Unavailable, when it ends first). h not holding the VIP: the
// file is written and Handoff returns at once. Undo with Resume.
//
// When h has nftables (nft on its PATH), new TCP connections to the VIP
// are dropped on h (SynDropTable) from just before the maintenance file
// is written until the VIP has moved: a client's SYN that reached h in
// that moment is not answered, so the client retransmits it (after its
// initial RTO, 1 s on Linux) to the new holder, instead of opening a
// connection on h that the move then resets. Without nft Handoff works
// the same, with that small window left (docs/metal.md).
func Handoff(ctx context.Context, h Host, peers []Host, vip string) (err error) {
	held, err := Holder(ctx, h, vip)
	if err != nil {
		return err
	}
	if held {
		waitPeerReady(ctx, h, peers)
		dropping, err := dropSYN(ctx, h, vip)
		if err != nil {
			return err
		}
		if dropping {
			defer func() {
				if uerr := undropSYN(ctx, h); err == nil {
					err = uerr
				}
			}()
		}
	}
	if err := h.Exec.Upload(ctx, MaintenancePath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("hand the vip off from %s: write %s: %w", h.Name, MaintenancePath, err)
	}
	if !held {
		return nil // nothing to hand off
	}
	// Held before the maintenance file: wait for another holder even when
	// h has dropped the VIP already (keepalived reads the file at once;
	// the lab's CI saw the VIP held by nobody right after a handoff that
	// checked only h).
	h.log().Info("vip: maintenance on, handing the vip off")
	var holders []string
	all := append([]Host{h}, peers...)
	err = wait.Until(ctx, 50*time.Millisecond, "the vip to leave "+h.Name, func() (bool, error) {
		got := onEach(all, func(x Host) (bool, error) { return Holder(ctx, x, vip) })
		holders = holders[:0]
		for i, x := range all {
			if got[i].err != nil {
				return false, got[i].err
			}
			if got[i].v {
				holders = append(holders, x.Name)
			}
		}
		return len(holders) == 1 && holders[0] != h.Name, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return errkind.Mark(errkind.Unavailable, fmt.Errorf("hand the vip off from %s (holders %v): %w: %w", h.Name, holders, ErrNoOtherHolder, err))
		}
		return fmt.Errorf("hand the vip off from %s: %w", h.Name, err)
	}
	h.log().Info("vip: handed off", "to", holders[0])
	return nil
}

// SynDropTable is the nftables table (family inet) in which Handoff drops
// new TCP connections to the VIP on the old holder while the VIP moves.
const SynDropTable = "hamaster_vip"

// SynDropLifetime bounds how long Handoff's drop of new connections
// lasts on a host nobody removes it from (hamaster killed mid-handoff):
// the VIP is an element of an nftables set with this timeout, and once it
// expires the rule matches nothing, without any command. It outlasts any
// handoff's wait (providers/metal's handoffWait, 30 s); Handoff deletes
// the table itself as soon as the VIP has moved.
const SynDropLifetime = 40 * time.Second

// dropSYN makes h drop new TCP connections (a SYN without ACK) to vip
// addressed to it, in the input hook before any other filter, for
// SynDropLifetime at most (nftables: the set element's timeout, in
// Debian's nftables 1.0.6 and every kernel since 4.1); it reports false,
// changing nothing, when h has no nft. Idempotent: the table is replaced
// whole (its element's lifetime starts again).
func dropSYN(ctx context.Context, h Host, vip string) (bool, error) {
	a, err := netip.ParseAddr(vip)
	if err != nil || !a.Is4() {
		return false, errkind.Errorf(errkind.InvalidArgument, "drop new connections to the vip on %s: %q is not an IPv4 address", h.Name, vip)
	}
	out, err := h.run(ctx, "drop new connections to the vip "+vip, fmt.Sprintf(`command -v nft >/dev/null 2>&1 || exit 0
nft -f - <<'RULES'
add table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	set handoff {
		type ipv4_addr
		flags timeout
		elements = { %[2]s timeout %[3]ds }
	}
	chain input {
		type filter hook input priority filter - 10; policy accept;
		ip daddr @handoff tcp flags & (syn | ack) == syn drop
	}
}
RULES
echo dropping`, SynDropTable, a, int(SynDropLifetime/time.Second)))
	if err != nil {
		return false, err
	}
	dropping := strings.TrimSpace(string(out)) == "dropping"
	if dropping {
		h.log().Info("vip: dropping new connections to the vip while it moves", "table", SynDropTable)
	}
	return dropping, nil
}

// undropSYN deletes Handoff's table from h; absent (or no nft) is
// success.
func undropSYN(ctx context.Context, h Host) error {
	_, err := h.run(ctx, "stop dropping new connections to the vip",
		"command -v nft >/dev/null 2>&1 || exit 0\nnft list table inet "+SynDropTable+" >/dev/null 2>&1 || exit 0\nnft delete table inet "+SynDropTable)
	return err
}

// Resume undoes Handoff: h may hold the VIP again, but takes it only when
// no other master does (nopreempt).
func Resume(ctx context.Context, h Host) error {
	if err := undropSYN(ctx, h); err != nil {
		return fmt.Errorf("resume vip on %s: %w", h.Name, err)
	}
	if err := h.Exec.Upload(ctx, MaintenancePath, []byte("0\n"), 0o644); err != nil {
		return fmt.Errorf("resume vip on %s: write %s: %w", h.Name, MaintenancePath, err)
	}
	h.log().Info("vip: maintenance off")
	return nil
}
