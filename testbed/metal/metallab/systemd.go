package metallab

import (
	"fmt"
	"path/filepath"

	"github.com/hamaster/hamaster/testbed/kubeadmhost"
)

// A lab host runs no systemd (it is a network namespace, not a machine),
// but hamaster runs the VIP's keepalived and HAProxy as systemd units
// (providers/metal/vip: kubeadm's ha-considerations option 1). Each host
// gets, in its own /usr/local/bin (first on the PATH of root, of sudo's
// secure_path and of logins), a stand-in for the part of systemctl that
// hamaster and the tests use, over the host's own /etc/systemd/system
// (kubeadmhost.Mounts): daemon-reload, enable/disable [--now], start,
// stop, restart, reload, is-active and status. A unit with no file there
// (kubeadm's kubelet, which the lab supervises itself) and any other
// verb go to the machine's own systemctl, as they did before the
// stand-in (kubeadm's calls fail there as on a host without systemd). A started unit's
// ExecStartPre lines run, then its ExecStart under a supervisor
// (UnitSupervisor, one process per unit) that restarts it when it exits
// as Restart=always and RestartSec ask, and stops it with SIGTERM to the
// main process (systemd's stop for KillMode=mixed, and for keepalived's
// own children alike), awaited up to 90 s (systemd's default
// TimeoutStopSec), then SIGKILL. The daemons are Debian's own binaries,
// named by the units: what a Debian master's systemd runs.
const (
	// Systemctl is the stand-in's name on the host's PATH.
	Systemctl = "systemctl"
	// UnitSupervisor supervises one started unit (its comm, so that a
	// test can find it by network namespace: a host cut off from SSH).
	UnitSupervisor = "metallab-unit"
	// SystemdStateDir holds each started unit's supervisor pid
	// (UNIT.pid), main pid (UNIT.main) and output (UNIT.log), in the
	// host's own /run.
	SystemdStateDir = "/run/metallab-systemd"
)

const systemctlScript = `#!/bin/sh
# metallab's systemctl stand-in (testbed/metal/metallab/systemd.go): the
# part of systemctl hamaster uses, on a lab host that runs no systemd.
set -u
units=/etc/systemd/system
state=` + SystemdStateDir + `
mkdir -p "$state"
active() { p=$(cat "$state/$1.pid" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
start() {
  [ -f "$units/$1" ] || { echo "Failed to start $1: Unit $1 not found." >&2; return 5; }
  active "$1" && return 0
  sed -n 's/^ExecStartPre=//p' "$units/$1" | while read -r pre; do eval "$pre" || exit 1; done || { echo "$1: ExecStartPre failed" >&2; return 1; }
  setsid -f ` + UnitSupervisor + ` "$1" </dev/null >>"$state/$1.log" 2>&1
  i=0
  until active "$1"; do i=$((i+1)); [ $i -le 50 ] || { echo "$1: its supervisor did not start" >&2; return 1; }; sleep 0.1; done
}
stop() {
  active "$1" || return 0
  kill -TERM "$p"
  i=0
  while kill -0 "$p" 2>/dev/null; do
    i=$((i+1))
    if [ $i -gt 900 ]; then
      m=$(cat "$state/$1.main" 2>/dev/null); [ -z "$m" ] || kill -KILL "$m" 2>/dev/null; kill -KILL "$p" 2>/dev/null
    fi
    sleep 0.1
  done
}
# Units without a file here (kubeadm's kubelet, containerd) and verbs not
# below go to the machine's own systemctl, as before the stand-in: the
# lab's kubelet is supervised by the lab, not by a unit.
for real in /usr/bin/systemctl /bin/systemctl; do [ -x "$real" ] && break; real=; done
case ${1:-} in daemon-reload|enable|disable|start|stop|restart|reload|is-active|status) known=1;; *) known=;; esac
if [ -n "$real" ]; then
  [ -n "$known" ] || exec "$real" "$@"
  for a in "$@"; do
    case $a in -*|daemon-reload|enable|disable|start|stop|restart|reload|is-active|status) ;; *) [ -f "$units/$a" ] || exec "$real" "$@";; esac
  done
fi
verb=${1:-}; [ $# -gt 0 ] && shift
now=
case "${1:-}" in --now) now=1; shift;; esac
rc=0
case $verb in
  daemon-reload) ;;
  enable) [ -z "$now" ] || for u; do start "$u" || rc=$?; done;;
  disable) [ -z "$now" ] || for u; do stop "$u" || rc=$?; done;;
  start) for u; do start "$u" || rc=$?; done;;
  stop) for u; do stop "$u" || rc=$?; done;;
  restart) for u; do stop "$u"; start "$u" || rc=$?; done;;
  reload) for u; do
      m=$(cat "$state/$u.main" 2>/dev/null)
      cmd=$(sed -n 's/^ExecReload=//p' "$units/$u")
      { active "$u" && [ -n "$m" ] && [ -n "$cmd" ]; } || { echo "$u: not active, or no ExecReload" >&2; rc=1; continue; }
      MAINPID=$m; eval "$cmd" || rc=$?
    done;;
  is-active) for u; do if active "$u"; then echo active; else echo inactive; rc=3; fi; done;;
  status) for u; do
      if active "$u"; then echo "$u: active (supervisor $p, main $(cat "$state/$u.main" 2>/dev/null))"; else echo "$u: inactive"; rc=3; fi
      tail -n 10 "$state/$u.log" 2>/dev/null
    done;;
  *) echo "metallab's systemctl: $verb is not supported (daemon-reload, enable, disable, start, stop, restart, reload, is-active, status)" >&2; exit 1;;
esac
exit $rc
`

const unitSupervisorScript = `#!/bin/sh
# ` + UnitSupervisor + ` UNIT (testbed/metal/metallab/systemd.go): runs UNIT's
# ExecStart, restarted as its Restart= and RestartSec= ask, until SIGTERM,
# which goes to the main process (awaited).
u=$1
units=/etc/systemd/system
state=` + SystemdStateDir + `
echo $$ > "$state/$u.pid"
stopping= main=
trap 'stopping=1; [ -z "$main" ] || kill -TERM "$main" 2>/dev/null' TERM
first=1
while [ -z "$stopping" ]; do
  # systemd runs ExecStartPre before every start, restarts too (the
  # first start's ran in systemctl start).
  [ -n "$first" ] || sed -n 's/^ExecStartPre=//p' "$units/$u" | while read -r pre; do eval "$pre"; done
  first=
  cmd=$(sed -n 's/^ExecStart=//p' "$units/$u")
  restart=$(sed -n 's/^Restart=//p' "$units/$u")
  sec=$(sed -n 's/^RestartSec=//p' "$units/$u")
  $cmd &
  main=$!
  echo "$main" > "$state/$u.main"
  echo "` + UnitSupervisor + `: $u started: $cmd (pid $main)"
  wait "$main"; rc=$?
  while kill -0 "$main" 2>/dev/null; do wait "$main"; rc=$?; done
  echo "` + UnitSupervisor + `: $u exited ($rc)"
  [ "$restart" = always ] || break
  [ -z "$stopping" ] || break
  # A systemd time span: 200ms, 1s, 1 (seconds); 100ms by default.
  sec=${sec:-100ms}
  case $sec in
    *ms) n=${sec%ms}; sec=$(printf '%d.%03d' $((n/1000)) $((n%1000)));;
    *s) sec=${sec%s};;
  esac
  sleep "$sec"
done
rm -f "$state/$u.pid" "$state/$u.main"
`

// writeSystemd writes the stand-in and its supervisor into the host's
// own /usr/local/bin.
func writeSystemd(h *Host) error {
	bin := kubeadmhost.MountSource(h.Dir, "/usr/local/bin")
	for name, script := range map[string]string{Systemctl: systemctlScript, UnitSupervisor: unitSupervisorScript} {
		if err := writeAtomic(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			return fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
	}
	return nil
}
