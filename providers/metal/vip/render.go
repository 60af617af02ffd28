package vip

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/template"
)

// Where the files live on a master: one directory of hamaster's under
// /etc/kubernetes. Not the distributions' paths: Debian's keepalived
// service starts whenever /etc/keepalived/keepalived.conf exists and its
// haproxy service runs /etc/haproxy/haproxy.cfg; hamaster's units run
// the same binaries on its own files, beside the distribution's services
// (which, left as installed, hold no port of the VIP's); and on the lab's
// hosts /etc/kubernetes is each host's own while the rest of /etc is
// shared.
const (
	ConfigDir          = "/etc/kubernetes/hamaster-vip"
	KeepalivedConfPath = ConfigDir + "/keepalived.conf"
	CheckScriptPath    = ConfigDir + "/check-apiserver.sh"
	// NotifyScriptPath is keepalived's notify script: it records this
	// host's VRRP state in StatePath (State), which a planned handoff
	// reads to wait for a peer ready to take the VIP.
	NotifyScriptPath = ConfigDir + "/notify.sh"
	// MaintenancePath is keepalived's track_file: "1" makes this host give
	// the VIP up and never take it (Handoff), "0" undoes it (Resume).
	MaintenancePath = ConfigDir + "/maintenance"
	HAProxyCfgPath  = ConfigDir + "/haproxy.cfg"
	// UnitDir holds the systemd units an administrator adds
	// (systemd.unit(5): /etc/systemd/system).
	UnitDir = "/etc/systemd/system"
	// KeepalivedUnit and HAProxyUnit are hamaster's units, enabled and
	// started (systemctl enable --now) by Apply, stopped and removed by
	// Remove.
	KeepalivedUnit     = "hamaster-keepalived.service"
	HAProxyUnit        = "hamaster-haproxy.service"
	KeepalivedUnitPath = UnitDir + "/" + KeepalivedUnit
	HAProxyUnitPath    = UnitDir + "/" + HAProxyUnit
	// LegacyManifestsDir holds the static pods' manifests that hamaster
	// wrote before it ran the daemons as host services (kubeadm's
	// doc's option 2); Apply and Remove delete them, so that an upgraded
	// hamaster takes a master over from its kubelet.
	LegacyManifestsDir = "/etc/kubernetes/manifests"
	// RunDir holds the pid files and HAProxy's admin socket: in the host's
	// own /run, shared with the pods by a hostPath.
	RunDir = "/run/hamaster-vip"
	// StatePath is the VRRP state keepalived last entered (MASTER,
	// BACKUP, FAULT or STOP), written by NotifyScriptPath.
	StatePath             = RunDir + "/keepalived.state"
	KeepalivedPidPath     = RunDir + "/keepalived.pid"
	KeepalivedVRRPPidPath = RunDir + "/keepalived-vrrp.pid"
	HAProxyPidPath        = RunDir + "/haproxy.pid"
	HAProxySocketPath     = RunDir + "/haproxy.sock"
	// BackendName is HAProxy's backend of apiservers.
	BackendName = "apiserver"
)

// File is one rendered file.
type File struct {
	Path string
	Data []byte
	Mode os.FileMode
}

// Files is one master's rendered configuration.
type Files struct {
	KeepalivedConf, CheckScript, NotifyScript, HAProxyCfg File
	KeepalivedUnit, HAProxyUnit                           File
	// The daemons' command lines, as the units' ExecStart runs them.
	KeepalivedCommand, HAProxyCommand []string
}

// All is every file in the order Apply writes them: the configuration
// first, the units last.
func (f Files) All() []File {
	return []File{f.KeepalivedConf, f.CheckScript, f.NotifyScript, f.HAProxyCfg, f.KeepalivedUnit, f.HAProxyUnit}
}

// legacyManifests are the static pods' manifests of earlier releases.
var legacyManifests = []string{LegacyManifestsDir + "/hamaster-keepalived.yaml", LegacyManifestsDir + "/hamaster-haproxy.yaml"}

// keepalivedCommand is keepalived's command line: in the foreground
// (systemd's Type=simple), logging to stdout (the journal), VRRP only,
// pid files under RunDir.
func keepalivedCommand(bin string) []string {
	return []string{bin, "--dont-fork", "--log-console", "--log-detail", "--vrrp",
		"--use-file=" + KeepalivedConfPath, "--pid=" + KeepalivedPidPath, "--vrrp_pid=" + KeepalivedVRRPPidPath}
}

// haproxyCommand is HAProxy's: master-worker mode (-W) in the foreground
// (-db), so that SIGUSR2 to the master (its pid in HAProxyPidPath)
// reloads seamlessly: the new worker takes over the listening sockets
// (stats socket "expose-fd listeners") and the old one finishes its
// connections.
func haproxyCommand(bin string) []string {
	return []string{bin, "-W", "-db", "-f", HAProxyCfgPath, "-p", HAProxyPidPath}
}

// The units. After the distributions' own (Debian's keepalived.service
// and haproxy.service): started after the network is up, reloaded by a
// signal to the main process (ExecReload: keepalived SIGHUP, HAProxy's
// master SIGUSR2), restarted whenever they exit (Restart=always, with no
// start limit: StartLimitIntervalSec=0, so that a daemon that cannot
// start yet keeps trying rather than ending "failed" after five tries
// in ten seconds), HAProxy stopped as Debian's unit does
// (KillMode=mixed: SIGTERM to the master, which stops its workers).
// keepalived restarts 200 ms after it died (RestartSec): sooner than a
// backup's Master_Down timer (3 adverts of 0.5 s and the skew), so the
// address a hard-killed keepalived left is gone (below) before another
// host takes the VIP; HAProxy one second after.
// RunDir is made by ExecStartPre rather than RuntimeDirectory=, which
// systemd would remove when either unit stops. keepalived's unit first
// deletes the VIP from its interface: a keepalived that died hard
// (SIGKILL, an OOM kill) leaves the address there, and a backup takes the
// VIP after its Master_Down timer (~1.7 s), so two hosts answer ARP for
// it until then; Restart=always starts keepalived again 200 ms later,
// and its ExecStartPre removes the stale address first. A keepalived that
// stops (SIGTERM) removes it itself, so on a live holder it is not there.
var unitTmpl = template.Must(template.New("unit").Parse(`# Rendered by hamaster for {{.Host}}; changes are overwritten.
# Design: docs/metal.md "The VIP"; after kubeadm's docs/ha-considerations.md
# (option 1: the services on the operating system).
[Unit]
Description={{.Description}}
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStartPre=/bin/mkdir -p {{.RunDir}}
{{- if .DropVIP}}
ExecStartPre=/bin/sh -c "ip -4 addr del {{.DropVIP}} 2>/dev/null; exit 0"
{{- end}}
ExecStart={{.Command}}
ExecReload=/bin/kill -{{.ReloadSignal}} $MAINPID
{{- if .KillMode}}
KillMode={{.KillMode}}
{{- end}}
Restart=always
RestartSec={{.RestartSec}}

[Install]
WantedBy=multi-user.target
`))

// keepalived.conf. Differences from kubeadm's docs/ha-considerations.md
// (interval 3, weight -2, fall 10, multicast, preemption), and why:
//   - check every 1 s, fall 2, rise 2, weight 0: two failed checks put the
//     instance into FAULT, which sends a priority-0 advert and removes the
//     VIP; a backup then takes over after its skew time ((256-priority)/256
//     s), not three adverts later. A weight would have to outweigh every
//     priority gap, and a lowered priority moves the VIP only after the
//     backups' Master_Down_Interval (RFC 3768 6.4.2: a backup discards a
//     lower-priority advert and waits for its timer).
//   - nopreempt (all BACKUP): a recovered master does not take the VIP
//     back; every move resets the connections held by the old holder's
//     HAProxy, so moves happen only when they must.
//   - VRRP version 3, adverts every 0.5 s: a dead holder is noticed after
//     Master_Down_Interval = 3 adverts + skew (RFC 5798 6.1: 1.5 s +
//     (256-priority)/256 × 0.5 s), under 2 s; with v2's whole seconds it
//     would be over 3 s (the lab's own self-test measures ~3.3 s).
//   - unicast to the other masters, adverts from anyone else ignored
//     (check_unicast_src; with no other master, no unicast keyword at all:
//     keepalived 2.2.7's --config-test calls unicast keywords without a
//     peer deprecated, and falls back to multicast): no reliance on
//     multicast on the segment
//     (switches with IGMP snooping, some virtual networks), and another
//     cluster's router with the same id is not heard. (VRRPv3 has no
//     authentication; v2's PASS was only a collision guard too.)
//   - track_file: the maintenance file, read on change (inotify), makes a
//     planned handoff immediate rather than a check period away.
var keepalivedTmpl = template.Must(template.New("keepalived.conf").Parse(`# Rendered by hamaster for {{.Host}}; changes are overwritten.
# Design: docs/metal.md "The VIP"; after kubeadm's docs/ha-considerations.md.
global_defs {
    router_id hamaster_{{.Host}}
    enable_script_security
    script_user root
}
vrrp_script hamaster_apiserver {
    script "{{.CheckScript}}"
    interval 1
    timeout 1
    fall 2
    rise 2
    weight 0
}
track_file hamaster_maintenance {
    file "{{.Maintenance}}"
    weight 0
    init_file 0
}
vrrp_instance hamaster_apiserver {
    state BACKUP
    nopreempt
    interface {{.Interface}}
    virtual_router_id {{.RouterID}}
    priority {{.Priority}}
    version 3
    advert_int 0.5
{{- if .Peers}}
    check_unicast_src
    unicast_src_ip {{.Self}}
    unicast_peer {
{{- range .Peers}}
        {{.}}
{{- end}}
    }
{{- end}}
    virtual_ipaddress {
        {{.VIP}}/32 dev {{.Interface}}
    }
    track_script {
        hamaster_apiserver
    }
    track_file {
        hamaster_maintenance
    }
    notify "{{.NotifyScript}}"
}
`))

// The check script: the local apiserver's /readyz (-k, as the doc's
// check_apiserver.sh: anonymous /readyz is public) and HAProxy's monitor,
// each bounded well under the 1 s interval.
// The notify script: keepalived runs it with TYPE NAME STATE PRIORITY on
// every state change; the state is kept in StatePath (renamed into
// place: a reader never sees half a word).
var notifyTmpl = template.Must(template.New("notify").Parse(`#!/bin/sh
# Rendered by hamaster: keepalived's notify; records this host's VRRP state
# for hamaster's planned handoff (docs/metal.md "The VIP").
mkdir -p {{.RunDir}} && printf '%s\n' "$3" > {{.State}}.tmp && mv -f {{.State}}.tmp {{.State}}
`))

var checkTmpl = template.Must(template.New("check").Parse(`#!/bin/sh
# Rendered by hamaster: keepalived's check of this master, every 1 s.
# Fails when the local apiserver is not ready or HAProxy does not answer.
curl --silent --fail --insecure --max-time 0.4 --output /dev/null https://127.0.0.1:{{.APIServerPort}}/readyz ||
    { echo "*** apiserver https://127.0.0.1:{{.APIServerPort}}/readyz not ready" >&2; exit 1; }
curl --silent --fail --max-time 0.4 --output /dev/null http://127.0.0.1:{{.HealthPort}}/healthz ||
    { echo "*** haproxy http://127.0.0.1:{{.HealthPort}}/healthz not answering" >&2; exit 1; }
exit 0
`))

// haproxy.cfg. As the doc's: TCP to every apiserver, checked with
// GET /readyz over TLS without verification ("check check-ssl verify
// none"). Our choices: checks every 1 s, fall 2 / rise 2; leastconn
// (watches are long-lived); on-marked-down shutdown-sessions, so that a
// failed apiserver's clients reconnect at once instead of hanging — a
// planned removal drains first (weight 0 / "state drain"), which never
// marks the server down, so drained sessions end on their own; a long
// tunnel timeout for watches.
//
// A new connection never waits on a dead apiserver for long (issue 33:
// the VIP moved in 1.56 s, but the new holder's HAProxy, whose checks
// had not yet failed on the dead host, sent a new connection there and
// the client waited 5.7 s). After HAProxy 2.6's configuration manual
// (the version Debian bookworm ships; doc/configuration.txt):
//   - timeout connect 500ms: "If the server is located on the same LAN
//     as HAProxy, the connection should be immediate (less than a few
//     milliseconds)" — a SYN unanswered for 500 ms means a dead host,
//     and its connection goes elsewhere (below) rather than waiting for
//     the kernel's own SYN retransmission at 1 s. The manual's advice of
//     4–5 s ("to cover one or several TCP packet losses") is for a
//     connection that has nowhere else to go; here a lost SYN costs
//     500 ms and another apiserver. It is also the checks' connect
//     timeout ("min("timeout connect", "inter")" when "timeout check" is
//     set), so a check of a dead host fails in 500 ms, not 1 s.
//   - option redispatch 1: "a positive value of 1 would indicate a
//     redispatch on every retry" (the default, -1, redispatches on the
//     last retry only, and "a turn-around timer of min("timeout
//     connect", one second) is applied before a retry occurs on the same
//     server"); "When a retry occurs, HAProxy tries to select another
//     server than the last one". retries 3: with redispatch on each, a
//     connection tries up to four servers, enough to pass two dead ones
//     of three, and a client whose every apiserver is down hears so
//     within 2 s.
//   - observe layer4, error-limit 1, on-error fastinter: "In layer4
//     mode, only successful/unsuccessful tcp connections are
//     significant"; one failed connection (error-limit's default is 10)
//     brings the next health check forward ("fastinter: force
//     fastinter"), and the checks decide (fall 2). Not mark-down,
//     sudden-death or fail-check: they change the server's health at
//     the failed connection itself, and a server marked down there
//     (sudden-death after two failed connections at once) has
//     on-marked-down shutdown-sessions end the very connection being
//     redispatched away from it: make bench VIP=1 lost a new connection
//     so at each apiserver kill with sudden-death (HAProxy's log: "D",
//     killed because the server went down). With mark-down, too, one
//     lost SYN to a healthy apiserver would end every watch on it.
//   - fastinter 250ms: the interval of checks on a server "Transitionally
//     UP (going down "fall")" or "Transitionally DOWN (going up "rise")",
//     and the delay of the check an observed error brings forward. A
//     dead host's apiserver (each check waiting out the 500 ms connect)
//     is marked down about 1.5 s after the first connection it fails
//     (0.25 + 0.5, twice), and at most about 2.25 s after its death
//     (the first check up to inter away), about when keepalived moves
//     the VIP, instead of up to about 4 s (two checks 1 s apart, each
//     with a 1 s connect timeout); a killed one (refused at once) about
//     0.5 s after its first refusal. A recovered one rises after two
//     passing checks 250 ms apart. A healthy server is checked every
//     inter (1 s), as before.
var haproxyTmpl = template.Must(template.New("haproxy.cfg").Parse(`# Rendered by hamaster for {{.Host}}; changes are overwritten.
# Design: docs/metal.md "The VIP"; after kubeadm's docs/ha-considerations.md.
global
    stats socket {{.Socket}} mode 600 level admin expose-fd listeners
    stats timeout 30s
defaults
    mode tcp
    option redispatch 1
    retries 3
    timeout connect 500ms
    timeout client 30s
    timeout server 30s
    timeout tunnel 1h
    timeout check 1s
# HAProxy's own health, asked by keepalived's check.
frontend hamaster_health
    mode http
    bind 127.0.0.1:{{.HealthPort}}
    timeout client 5s
    monitor-uri /healthz
# The cluster endpoint: VIP:{{.FrontendPort}} (bound on every address, so
# that it serves as soon as keepalived adds the VIP).
frontend apiserver
    bind :{{.FrontendPort}}
    default_backend {{.Backend}}
backend {{.Backend}}
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
    default-server check check-ssl verify none inter 1s fastinter 250ms fall 2 rise 2 observe layer4 error-limit 1 on-error fastinter on-marked-down shutdown-sessions
{{- range .Servers}}
    server {{.Name}} {{.Address}}:{{$.APIServerPort}}{{if .Drained}} weight 0{{end}}
{{- end}}
`))

// Render validates cfg and renders this host's files. cfg.Interface must
// be set: Apply finds it on the host when the caller leaves it empty.
func Render(cfg Config) (Files, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return Files{}, err
	}
	if cfg.Interface == "" {
		return Files{}, fmt.Errorf("render vip config of %s: interface not resolved (Apply finds the one holding %s)", cfg.Host, cfg.self().Address)
	}
	self := cfg.self()
	var peers []string
	type server struct {
		Name, Address string
		Drained       bool
	}
	var servers []server
	for _, m := range cfg.Masters {
		if m.Name != cfg.Host {
			peers = append(peers, m.Address)
		}
		servers = append(servers, server{m.Name, m.Address, slices.Contains(cfg.Drained, m.Name)})
	}
	// Config.Peers too, in address order: the same list whichever of them
	// are masters (see Config.Peers).
	for _, a := range cfg.Peers {
		if a != self.Address && !slices.Contains(peers, a) {
			peers = append(peers, a)
		}
	}
	slices.SortFunc(peers, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
	data := map[string]any{
		"Host": cfg.Host, "CheckScript": CheckScriptPath, "Maintenance": MaintenancePath,
		"NotifyScript": NotifyScriptPath, "RunDir": RunDir, "State": StatePath,
		"Interface": cfg.Interface, "RouterID": cfg.RouterID, "Priority": cfg.Priority,
		"Self": self.Address, "Peers": peers, "VIP": cfg.VIP,
		"APIServerPort": cfg.APIServerPort, "FrontendPort": cfg.FrontendPort, "HealthPort": cfg.HealthPort,
		"Socket": HAProxySocketPath, "Backend": BackendName, "Servers": servers,
	}
	exec := func(t *template.Template) ([]byte, error) {
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("render %s for %s: %w", t.Name(), cfg.Host, err)
		}
		return b.Bytes(), nil
	}
	f := Files{KeepalivedCommand: keepalivedCommand(cfg.KeepalivedPath), HAProxyCommand: haproxyCommand(cfg.HAProxyPath)}
	for _, x := range []struct {
		t    *template.Template
		dst  *File
		path string
		mode os.FileMode
	}{
		{keepalivedTmpl, &f.KeepalivedConf, KeepalivedConfPath, 0o644},
		// enable_script_security: owned by root, writable by root only.
		{checkTmpl, &f.CheckScript, CheckScriptPath, 0o755},
		{notifyTmpl, &f.NotifyScript, NotifyScriptPath, 0o755},
		{haproxyTmpl, &f.HAProxyCfg, HAProxyCfgPath, 0o644},
	} {
		b, err := exec(x.t)
		if err != nil {
			return Files{}, err
		}
		*x.dst = File{Path: x.path, Data: b, Mode: x.mode}
	}
	for _, u := range []struct {
		dst                                 *File
		path, description, signal, killMode string
		restartSec                          string
		command                             []string
		dropVIP                             string
	}{
		{&f.KeepalivedUnit, KeepalivedUnitPath, "hamaster: keepalived, the cluster endpoint's VIP (VRRP)", "HUP", "", "200ms", f.KeepalivedCommand, cfg.VIP + "/32 dev " + cfg.Interface},
		{&f.HAProxyUnit, HAProxyUnitPath, "hamaster: HAProxy, the cluster endpoint's load balancer", "USR2", "mixed", "1s", f.HAProxyCommand, ""},
	} {
		var b bytes.Buffer
		if err := unitTmpl.Execute(&b, map[string]any{
			"Host": cfg.Host, "Description": u.description, "RunDir": RunDir, "DropVIP": u.dropVIP,
			"Command": strings.Join(u.command, " "), "ReloadSignal": u.signal, "KillMode": u.killMode, "RestartSec": u.restartSec,
		}); err != nil {
			return Files{}, fmt.Errorf("render %s for %s: %w", u.path, cfg.Host, err)
		}
		*u.dst = File{Path: u.path, Data: b.Bytes(), Mode: 0o644}
	}
	return f, nil
}
