package kubeadm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Upgrading a master in place, as kubeadm's "Upgrading kubeadm clusters"
// page has the operator do on each control-plane node
// (https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/):
// kubeadm's package of the new version installed; `kubeadm upgrade apply
// <version> -y` on the first master (cmd/kubeadm/app/cmd/upgrade/apply.go:
// the cluster-wide configuration and the addons change too), `kubeadm
// upgrade node` on the others (cmd/kubeadm/app/cmd/upgrade/node.go);
// then the kubelet's and kubectl's packages, and `systemctl restart
// kubelet`.
//
// What kubeadm leaves to the operator, hamaster does:
//   - a backup before anything changes (kubeadm keeps only the manifests
//     and etcd's data it replaced, under /etc/kubernetes/tmp, and reverts
//     only the one component that failed: phases/upgrade/staticpods.go
//     rollbackOldManifests), restored whole by RollbackMaster, with
//     kubeadm's copy of etcd's data when the upgraded etcd is not
//     healthy and kubeadm was stopped before it restored that itself
//     (rollbackEtcdData; etcdDataScript);
//   - fail fast: kubeadm waits up to 5 minutes for a component's static
//     pod hash to change and for its health (staticpods.go
//     upgradeComponent: waiter.WaitForStaticPodHashChange, then
//     WaitForPodsWithLabel, bounded by UpgradeManifestTimeout;
//     kubeadm#2927, #2061); hamaster watches the master while kubeadm
//     runs and stops kubeadm once the new kube-apiserver exits (its
//     first exit), or once it started and did not serve /livez within
//     the upgrade's health timeout (the operator's --health-timeout).

// UpgradeBackupDir is where UpgradeMaster saves, on the master, what
// RollbackMaster restores: the master's own directory of hamaster's
// (/var/lib/hamaster holds the metal provider's claim too).
const UpgradeBackupDir = "/var/lib/hamaster/upgrade-backup"

// Files beside the backup: kubeadm's pid while it runs (a process group
// of its own, so hamaster can stop it and whatever it started) and its
// output.
const (
	upgradePIDFile = "/run/hamaster-kubeadm-upgrade.pid"
	upgradeLogFile = "/var/lib/hamaster/kubeadm-upgrade.log"
)

// DefaultInstallCommand "installs the packages" of a version on a
// master: the Debian commands of kubeadm's upgrade page (pkgs.k8s.io has
// one repository a minor version, "Changing the package repository":
// the repository line moved to {minor} first), downgrades allowed for a
// rollback.
const DefaultInstallCommand = `sed -i -E 's#/core:/stable:/v[0-9]+\.[0-9]+/deb/#/core:/stable:/{minor}/deb/#' /etc/apt/sources.list.d/kubernetes.list && ` +
	`apt-mark unhold {packages} && apt-get update && apt-get install -y --allow-downgrades {pinned} && apt-mark hold {packages}`

// DefaultRestartKubeletCommand is the upgrade page's restart.
const DefaultRestartKubeletCommand = "systemctl daemon-reload && systemctl restart kubelet"

// Defaults of UpgradeOptions' bounds.
const (
	// UpgradeTimeout bounds UpgradeMaster's work besides the new
	// kube-apiserver's start (packages, kubeadm's phases); the start's
	// grace is added to it.
	UpgradeTimeout = 10 * time.Minute
	// DefaultAPIServerStartGrace is how long a new kube-apiserver that
	// started may not serve /livez when UpgradeMaster's caller gives no
	// health timeout: kubeadm's own window, the kube-apiserver static
	// pod's startupProbe (failureThreshold × periodSeconds, from
	// ClusterConfiguration timeouts.controlPlaneComponentHealthCheck,
	// default 4m: cmd/kubeadm/app/util/staticpod/utils.go, v1beta4).
	// A speed bound is no fail-fast signal: a busy host starts a
	// kube-apiserver slower (the metal walk's v1.34.4 took more than
	// 15 s to serve at load 18). Failing fast comes from exits: a
	// kube-apiserver that exits is noticed at its first exit.
	DefaultAPIServerStartGrace = 4 * time.Minute
	// RollbackTimeout bounds the wait of RollbackMaster for the restored
	// apiserver.
	RollbackTimeout = 3 * time.Minute
	// EnvInstallCommand names UpgradeOptions.InstallCommand in the
	// environment (hamaster.env of the metal lab sets it).
	EnvInstallCommand = "HAMASTER_KUBEADM_INSTALL_COMMAND"
	// EnvIgnorePreflightErrors names UpgradeOptions.IgnorePreflightErrors
	// (comma-separated) in the environment.
	EnvIgnorePreflightErrors = "HAMASTER_KUBEADM_IGNORE_PREFLIGHT_ERRORS"
	// EnvRestartKubeletCommand names UpgradeOptions.RestartKubeletCommand
	// in the environment.
	EnvRestartKubeletCommand = "HAMASTER_KUBEADM_RESTART_KUBELET_COMMAND"
)

// UpgradeOptions are how UpgradeMaster and RollbackMaster do what the
// upgrade page leaves to the machine's tools.
type UpgradeOptions struct {
	// InstallCommand installs packages of a version on a master, a sh
	// command line in which {version} (v1.34.4), {minor} (v1.34),
	// {packages} ("kubeadm", or "kubelet kubectl") and {pinned} (each
	// package pinned: kubeadm='1.34.4-*') are replaced;
	// DefaultInstallCommand when "".
	InstallCommand string
	// RestartKubeletCommand restarts a master's kubelet;
	// DefaultRestartKubeletCommand when "".
	RestartKubeletCommand string
	// RestartKubelet, when set, restarts machine's kubelet in place of
	// RestartKubeletCommand (a test bed whose hosts run no systemd).
	RestartKubelet func(ctx context.Context, machine string) error
	// APIServerArgs are kube-apiserver flags (--name=value) the upgrade
	// sets: kubeadm-config's apiServer.extraArgs, the operator's way to
	// change a flag (kubeadm's "Reconfiguring a kubeadm cluster"), which
	// upgrade apply and upgrade node write into every master's manifest.
	APIServerArgs []string
	// IgnorePreflightErrors are kubeadm upgrade's checks not to fail on
	// (--ignore-preflight-errors): CreateJob where the cluster runs no
	// ordinary pods (a cluster without a pod network, the test bed).
	IgnorePreflightErrors []string
}

// UpgradeOptionsFromEnv reads the options the environment sets
// (EnvInstallCommand, EnvIgnorePreflightErrors, EnvRestartKubeletCommand).
func UpgradeOptionsFromEnv(getenv func(string) string) UpgradeOptions {
	o := UpgradeOptions{InstallCommand: getenv(EnvInstallCommand), RestartKubeletCommand: getenv(EnvRestartKubeletCommand)}
	for _, c := range strings.Split(getenv(EnvIgnorePreflightErrors), ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.IgnorePreflightErrors = append(o.IgnorePreflightErrors, c)
		}
	}
	return o
}

// SetUpgradeOptions sets how f upgrades masters.
func (f *Flavor) SetUpgradeOptions(o UpgradeOptions) { f.up = o }

// WithAPIServerArgs implements flavors.FlagUpgrader: f, upgrading with
// args as kube-apiserver's flags besides its own.
func (f *Flavor) WithAPIServerArgs(args []string) flavors.Upgrader {
	g := *f
	g.up.APIServerArgs = append([]string(nil), args...)
	return &g
}

var (
	_ flavors.Upgrader     = (*Flavor)(nil)
	_ flavors.FlagUpgrader = (*Flavor)(nil)
)

// InstallCommandFor is o's install command for packages at v.
func (o UpgradeOptions) InstallCommandFor(v string, packages ...string) (string, error) {
	sv, err := version.ParseSemantic(v)
	if err != nil || !strings.HasPrefix(v, "v") {
		return "", errkind.Errorf(errkind.InvalidArgument, "version %q: want a Kubernetes release such as v1.34.4", v)
	}
	cmd := o.InstallCommand
	if cmd == "" {
		cmd = DefaultInstallCommand
	}
	pinned := make([]string, len(packages))
	for i, p := range packages {
		pinned[i] = p + "='" + strings.TrimPrefix(v, "v") + "-*'"
	}
	return strings.NewReplacer("{version}", v, "{minor}", fmt.Sprintf("v%d.%d", sv.Major(), sv.Minor()),
		"{packages}", strings.Join(packages, " "), "{pinned}", strings.Join(pinned, " ")).Replace(cmd), nil
}

func (f *Flavor) install(ctx context.Context, machine, v string, packages ...string) error {
	cmd, err := f.up.InstallCommandFor(v, packages...)
	if err != nil {
		return err
	}
	f.log.Info("installing packages", "machine", machine, "version", v, "packages", packages)
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, cmd); err != nil {
		return fmt.Errorf("install %s %s on %s: %w (stderr: %s)", strings.Join(packages, ", "), v, machine, err, tail(stderr))
	}
	return nil
}

func (f *Flavor) restartKubelet(ctx context.Context, machine string) error {
	if f.up.RestartKubelet != nil {
		return f.up.RestartKubelet(ctx, machine)
	}
	cmd := f.up.RestartKubeletCommand
	if cmd == "" {
		cmd = DefaultRestartKubeletCommand
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, cmd); err != nil {
		return fmt.Errorf("restart the kubelet on %s: %w (stderr: %s)", machine, err, tail(stderr))
	}
	return nil
}

// backupScript saves what RollbackMaster restores into UpgradeBackupDir
// (an upgrade's: the addons too; the first master's: the cluster-wide
// ConfigMaps),
// unless a backup of the same upgrade is there already (a re-run after a
// crash must not save the half-upgraded state over the good one): the
// backup is made in a temporary directory and renamed into place whole,
// so the directory's presence means a complete backup. $1 is the
// target version, $2 "first" to save the cluster-wide ConfigMaps, $3
// "addons" to save the addons (an upgrade's backup: a certificate
// renewal's, which may run while the API refuses expired certificates,
// reads nothing through it).
const backupScript = `set -e
B=` + UpgradeBackupDir + `
if [ -d "$B" ]; then
  t=$(cat "$B/target")
  if [ "$t" = "$1" ]; then echo kept; exit 0; fi
  echo "a backup of the upgrade to $t is on this master ($B): roll that upgrade back or finish it first" >&2; exit 3
fi
rm -rf "$B.tmp"; mkdir -p "$B.tmp/conf" "$B.tmp/kubelet"
cp -a /etc/kubernetes/manifests "$B.tmp/manifests"
cp -a /etc/kubernetes/pki "$B.tmp/pki"
for f in /etc/kubernetes/*.conf; do [ -e "$f" ] && cp -a "$f" "$B.tmp/conf/"; done
for f in config.yaml kubeadm-flags.env; do [ -e "/var/lib/kubelet/$f" ] && cp -a "/var/lib/kubelet/$f" "$B.tmp/kubelet/"; done
kubeadm version -o short > "$B.tmp/kubeadm-version"
kubelet --version | awk '{print $2}' > "$B.tmp/kubelet-version"
if [ "$2" = first ]; then
  k="kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get configmap"
  $k kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' > "$B.tmp/kubeadm-config.yaml"
  $k kubelet-config -o jsonpath='{.data.kubelet}' > "$B.tmp/kubelet-config.yaml"
  [ -s "$B.tmp/kubeadm-config.yaml" ] && [ -s "$B.tmp/kubelet-config.yaml" ]
fi
if [ "$3" = addons ]; then
  mkdir "$B.tmp/addons"
  for o in ` + upgradeAddons + `; do
    kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get "$o" --ignore-not-found -o json > "$B.tmp/addons/${o%%/*}-${o#*/}.json"
  done
fi
echo "$1" > "$B.tmp/target"
echo "$2" > "$B.tmp/first"
sync
mv "$B.tmp" "$B"
echo saved
`

// backup runs backupScript on machine; addons for an upgrade's.
func (f *Flavor) backup(ctx context.Context, machine, v string, first, addons bool) error {
	which, what := "node", "none"
	if first {
		which = "first"
	}
	if addons {
		what = "addons"
	}
	out, stderr, err := f.m.RunOnMachine(ctx, machine, "sh -c "+remote.ShellQuote(backupScript)+" backup "+remote.ShellQuote(v)+" "+which+" "+what)
	if err != nil {
		if strings.Contains(string(stderr), "a backup of the upgrade to") {
			return errkind.Errorf(errkind.FailedPrecondition, "master %s: %s", machine, tail(stderr))
		}
		return fmt.Errorf("back up master %s before its upgrade: %w (stderr: %s)", machine, err, tail(stderr))
	}
	f.log.Info("upgrade backup", "machine", machine, "dir", UpgradeBackupDir, "result", strings.TrimSpace(string(out)))
	return nil
}

// UpgradeMaster implements flavors.Upgrader: on replica, the backup
// (UpgradeBackupDir; with first, kubeadm-config and kubelet-config too),
// the APIServerArgs into kubeadm-config (first), kubeadm's package of
// version, `kubeadm upgrade apply <version> -y` (first) or `kubeadm
// upgrade node` watched and stopped when the new kube-apiserver cannot
// start, the kubelet's and kubectl's packages, the kubelet restarted,
// and the apiserver serving /readyz at version. A master already there
// is left as it is. On error, RollbackMaster restores the backup.
func (f *Flavor) UpgradeMaster(ctx context.Context, replica providers.Replica, v string, first bool, health time.Duration) error {
	if health <= 0 {
		health = DefaultAPIServerStartGrace
	}
	ctx, cancel := context.WithTimeout(ctx, UpgradeTimeout+health)
	defer cancel()
	m := replica.Name
	if _, err := f.up.InstallCommandFor(v, "kubeadm"); err != nil {
		return err
	}
	// Observe: a master at version already (a re-run after a crash past
	// the upgrade) is done.
	if done, err := f.upgraded(ctx, m, v, first); err != nil {
		return err
	} else if done {
		f.log.Info("master already upgraded", "machine", m, "version", v)
		return nil
	}
	if err := f.backup(ctx, m, v, first, true); err != nil {
		return err
	}
	if first && len(f.up.APIServerArgs) > 0 {
		if err := f.setAPIServerArgs(ctx, m, f.up.APIServerArgs); err != nil {
			return err
		}
	}
	if err := f.install(ctx, m, v, "kubeadm"); err != nil {
		return err
	}
	cmd := "kubeadm upgrade node"
	if first {
		cmd = "kubeadm upgrade apply " + v + " -y"
	}
	if len(f.up.IgnorePreflightErrors) > 0 {
		cmd += " --ignore-preflight-errors=" + remote.ShellQuote(strings.Join(f.up.IgnorePreflightErrors, ","))
	}
	if err := f.runWatched(ctx, replica, cmd, health); err != nil {
		return err
	}
	if err := f.install(ctx, m, v, "kubelet", "kubectl"); err != nil {
		return err
	}
	if err := f.restartKubelet(ctx, m); err != nil {
		return err
	}
	return f.waitAPIServer(ctx, m, v)
}

// upgraded reports whether machine runs version: its apiserver's
// manifest, its kubelet, and (first) kubeadm-config say so.
func (f *Flavor) upgraded(ctx context.Context, m, v string, first bool) (bool, error) {
	cur, err := f.RunningVersion(ctx, m)
	if err != nil || cur != v {
		return false, err
	}
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), m, "kubelet --version")
	if err != nil {
		return false, fmt.Errorf("kubelet --version on %s: %w", m, err)
	}
	if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes")) != v {
		return false, nil
	}
	if first {
		_, cfg, err := f.ClusterConfigurationOf(ctx, m)
		if err != nil || cfg.KubernetesVersion != v {
			return false, err
		}
	}
	return true, nil
}

// setAPIServerArgs writes args into kubeadm-config's
// apiServer.extraArgs, through machine.
func (f *Flavor) setAPIServerArgs(ctx context.Context, m string, args []string) error {
	// One key edited, the rest of the object kept (its annotations:
	// former.go's former endpoints); nothing replaced when the args are
	// set already.
	return f.editConfigMap(ctx, m, "kube-system", "kubeadm-config", "ClusterConfiguration", func(doc []byte) ([]byte, bool, error) {
		out, changed, err := SetAPIServerExtraArgs(doc, args)
		if changed {
			f.log.Info("kubeadm-config: apiServer.extraArgs", "args", args)
		}
		return out, changed, err
	})
}

// SetAPIServerExtraArgs sets each of args (--name=value) in the
// ClusterConfiguration doc's apiServer.extraArgs (v1beta4: a list of
// name/value; v1beta3: a map), keeping everything else. changed is
// false when doc already says so.
func SetAPIServerExtraArgs(doc []byte, args []string) (out []byte, changed bool, err error) {
	return editClusterConfiguration(doc, func(top *yaml.Node) (bool, error) { return setExtraArgs(top, args) })
}

// setExtraArgs sets args in the ClusterConfiguration top's
// apiServer.extraArgs.
func setExtraArgs(top *yaml.Node, args []string) (changed bool, err error) {
	v1beta3 := strings.HasSuffix(mapValue(top, "apiVersion").Value, "/v1beta3")
	api := mapValue(top, "apiServer")
	if api == nil || api.Kind != yaml.MappingNode {
		api = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		setMapValue(top, "apiServer", api)
	}
	api.Style &^= yaml.FlowStyle
	ea := mapValue(api, "extraArgs")
	want := yaml.SequenceNode
	if v1beta3 {
		want = yaml.MappingNode
	}
	if ea == nil || ea.Kind != want {
		ea = &yaml.Node{Kind: want, Tag: map[yaml.Kind]string{yaml.SequenceNode: "!!seq", yaml.MappingNode: "!!map"}[want]}
		setMapValue(api, "extraArgs", ea)
	}
	ea.Style &^= yaml.FlowStyle
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || name == "" || !strings.HasPrefix(a, "--") {
			return false, errkind.Errorf(errkind.InvalidArgument, "apiserver flag %q: want --name=value", a)
		}
		if v1beta3 {
			if cur := mapValue(ea, name); cur != nil && cur.Value == value {
				continue
			}
			setMapValue(ea, name, scalar(value))
			changed = true
			continue
		}
		found := false
		for _, item := range ea.Content {
			if n := mapValue(item, "name"); n != nil && n.Value == name {
				found = true
				if cur := mapValue(item, "value"); cur == nil || cur.Value != value {
					setMapValue(item, "value", scalar(value))
					changed = true
				}
			}
		}
		if !found {
			ea.Content = append(ea.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{scalar("name"), scalar(name), scalar("value"), scalar(value)}})
			changed = true
		}
	}
	return changed, nil
}

// podLog is one log file of a container: its size, and how long before
// it was listed it was last written (the master's own clock).
type podLog struct {
	size int64
	age  time.Duration
}

// apiserverLogs lists the log files of node's kube-apiserver containers:
// the kubelet's pod logs,
// /var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart count>.log
// (the real kubelet's layout, the test bed's too); and sum, the SHA-256
// of the kube-apiserver manifest.
func (f *Flavor) apiserverLogs(ctx context.Context, m, node string) (sum string, logs map[string]podLog, err error) {
	cmd := "date +%s; sha256sum " + APIServerManifest + " 2>/dev/null | cut -c1-64; echo ---; " +
		"stat -c '%s %Y %n' /var/log/pods/kube-system_kube-apiserver-" + remote.ShellQuote(node) + "_*/kube-apiserver/*.log 2>/dev/null || true"
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), m, cmd)
	if err != nil {
		return "", nil, err
	}
	head, rest, _ := strings.Cut(string(out), "---\n")
	now, sum, _ := strings.Cut(strings.TrimSpace(head), "\n")
	nowSec, _ := strconv.ParseInt(strings.TrimSpace(now), 10, 64)
	logs = map[string]podLog{}
	for _, line := range strings.Split(rest, "\n") {
		fs := strings.SplitN(strings.TrimSpace(line), " ", 3)
		if len(fs) != 3 {
			continue
		}
		size, _ := strconv.ParseInt(fs[0], 10, 64)
		mtime, _ := strconv.ParseInt(fs[1], 10, 64)
		logs[fs[2]] = podLog{size: size, age: time.Duration(nowSec-mtime) * time.Second}
	}
	return strings.TrimSpace(sum), logs, nil
}

// APIServerFailedError is an upgrade stopped because the master's new
// kube-apiserver could not start.
type APIServerFailedError struct {
	Machine string
	// Cause says what was seen: its exits, or /livez not served.
	Cause string
	// After is how long after its manifest changed it was noticed
	// (the kubelet notices a changed manifest within its file check
	// period, and stops the old apiserver gracefully first); Started
	// how long after the new container's first log line; Exited how
	// long after the new one last wrote its log before exiting (seconds
	// of the master's clock), 0 when it did not exit.
	After, Started, Exited time.Duration
	// Log is the end of the failed container's log.
	Log string
}

func (e *APIServerFailedError) Error() string {
	s := fmt.Sprintf("master %s: the new kube-apiserver cannot start: %s; noticed %v after it started, %v after its manifest changed (kubeadm stopped: it would have waited 5 minutes, kubeadm#2927)", e.Machine, e.Cause, e.Started.Round(100*time.Millisecond), e.After.Round(100*time.Millisecond))
	if e.Log != "" {
		s += "; its log: " + e.Log
	}
	return s
}

// runWatched runs cmd (kubeadm upgrade) on replica in a process group
// of its own, and watches the master while it runs: once the
// kube-apiserver manifest changed, a kube-apiserver container that
// exits (its pod's log gets a next restart's file) or /livez not served
// for grace once it started stops kubeadm and fails with an
// *APIServerFailedError.
func (f *Flavor) runWatched(ctx context.Context, replica providers.Replica, cmd string, grace time.Duration) error {
	m := replica.Name
	node := f.m.MachineHostname(replica.Name, replica.Address)
	// A kubeadm upgrade an earlier run left (hamaster killed while it
	// ran: setsid put it out of reach of the SSH session's end) is
	// stopped first: left alone, it would end its own wait by moving
	// its backup manifests over this upgrade's.
	if err := f.stopKubeadm(ctx, m, nil); err != nil {
		return err
	}
	sum0, logs0, err := f.apiserverLogs(ctx, m, node)
	if err != nil {
		return fmt.Errorf("master %s before its upgrade: %w", m, err)
	}
	// setsid -w: a session and process group of its own (killed as a
	// group), waited for, so the SSH command returns when kubeadm does.
	inner := "echo $$ > " + upgradePIDFile + "; exec " + cmd
	// The pid file goes when kubeadm ends, so that a later stop cannot
	// take a reused pid for it.
	full := "setsid -w sh -c " + remote.ShellQuote(inner) + " > " + upgradeLogFile + " 2>&1 < /dev/null; rc=$?; rm -f " + upgradePIDFile + "; exit $rc"
	f.log.Info("kubeadm upgrade", "machine", m, "command", cmd, "log", upgradeLogFile)
	done := make(chan error, 1)
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	go func() {
		_, _, err := f.m.RunOnMachine(kctx, m, full)
		done <- err
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	// The old pod's log directory: its files grow as the old apiserver
	// logs while it stops, which is neither a start nor an exit.
	oldDir := currentDir(logs0)
	var changedAt, startedAt, downSince time.Time
	for {
		select {
		case err := <-done:
			if err != nil {
				out, _, _ := f.m.RunOnMachine(providers.ReadOnly(context.WithoutCancel(ctx)), m, "tail -n 8 "+upgradeLogFile)
				if ctx.Err() != nil {
					// The SSH command ended with ctx, kubeadm (setsid)
					// did not: stopped as on the ctx.Done case, which
					// the select may not have picked.
					_ = f.stopKubeadm(context.WithoutCancel(ctx), m, nil) // logged; the rollback stops it again
					return fmt.Errorf("%s on %s: %w", cmd, m, ctx.Err())
				}
				return fmt.Errorf("%s on %s: %w; its output: %s", cmd, m, err, strings.TrimSpace(string(out)))
			}
			return nil
		case <-ctx.Done():
			_ = f.stopKubeadm(context.WithoutCancel(ctx), m, done) // logged; the rollback stops it again
			return fmt.Errorf("%s on %s: %w", cmd, m, ctx.Err())
		case <-tick.C:
		}
		sum, logs, err := f.apiserverLogs(ctx, m, node)
		if err != nil {
			continue // the master's way in hiccuped; kubeadm goes on
		}
		if changedAt.IsZero() {
			if sum == sum0 || sum == "" {
				continue
			}
			changedAt = time.Now()
			f.log.Info("kube-apiserver manifest changed; watching it start", "machine", m)
		}
		// The kubelet stops the old apiserver (its graceful shutdown
		// takes seconds) before it starts the new one: /livez is
		// judged from the new container's first log line on.
		if startedAt.IsZero() && startedSince(logs0, logs, oldDir) {
			startedAt = time.Now()
		}
		var fail *APIServerFailedError
		up := f.livez(ctx, m)
		switch {
		case up || startedAt.IsZero():
			downSince = time.Time{}
		case downSince.IsZero():
			downSince = time.Now()
		}
		if exits, last := exitsSince(logs0, logs, oldDir); exits > 0 {
			out, _, _ := f.m.RunOnMachine(providers.ReadOnly(ctx), m, "tail -n 3 "+remote.ShellQuote(last))
			fail = &APIServerFailedError{Machine: m, Cause: fmt.Sprintf("it exited (%d restarts)", exits), Log: strings.TrimSpace(string(out)), Exited: logs[last].age}
		} else if !downSince.IsZero() && time.Since(downSince) >= grace {
			fail = &APIServerFailedError{Machine: m, Cause: fmt.Sprintf("it started but did not serve /livez for %v", grace)}
		} else if startedAt.IsZero() && time.Since(changedAt) >= APIServerStartBound {
			fail = &APIServerFailedError{Machine: m, Cause: fmt.Sprintf("the kubelet did not start it within %v", APIServerStartBound)}
		}
		if fail != nil {
			fail.After = time.Since(changedAt)
			if !startedAt.IsZero() {
				fail.Started = time.Since(startedAt)
			}
			f.log.Warn("stopping kubeadm", "machine", m, "err", fail)
			_ = f.stopKubeadm(context.WithoutCancel(ctx), m, done) // logged; the rollback stops it again
			return fail
		}
	}
}

// APIServerStartBound bounds the wait for the kubelet to start the new
// kube-apiserver once its manifest changed (its file check period, the
// old one's graceful stop).
const APIServerStartBound = 2 * time.Minute

// currentDir is the directory of the youngest log file: the running
// container's.
func currentDir(logs map[string]podLog) string {
	dir, best := "", time.Duration(-1)
	for name, l := range logs {
		if best < 0 || l.age < best || (l.age == best && name > dir) {
			dir, best = path.Dir(name), l.age
		}
	}
	return dir
}

// startedSince reports whether a kube-apiserver container other than
// the one logging in skipDir started: a log file new or grown since
// before.
func startedSince(before, now map[string]podLog, skipDir string) bool {
	for name, l := range now {
		if path.Dir(name) == skipDir {
			continue
		}
		if old, ok := before[name]; !ok || l.size > old.size {
			return true
		}
	}
	return false
}

// exitsSince counts the kube-apiserver restarts a pod log shows that
// were not before, outside skipDir (the old container's): files N.log
// (N ≥ 1: the Nth restart) new or grown since before. last is the log
// of the run before the latest restart.
func exitsSince(before, now map[string]podLog, skipDir string) (exits int, last string) {
	best := -1
	for name, l := range now {
		if path.Dir(name) == skipDir {
			continue
		}
		if old, ok := before[name]; ok && l.size <= old.size {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(path.Base(name), ".log"))
		if err != nil || n < 1 {
			continue
		}
		exits++
		if n > best {
			best = n
			last = path.Join(path.Dir(name), strconv.Itoa(n-1)+".log")
		}
	}
	return exits, last
}

// stopGroupScript stops the process group whose leader's pid the file
// $1 holds, when that leader is still what the file was written for:
// the leader of its own process group, its command line $2's (kubeadm
// upgrade …) or the sh that writes the file and execs it (a pid reused
// by another program, whatever its name, is left alone). SIGTERM, SIGKILL
// after 10 s; the group counts as gone once no member but a zombie is
// left (its parent reaps those). It removes the file, prints "stopped"
// when it signalled, and fails when the group outlives SIGKILL by 5 s.
//
// Only "kill -s SIG" is portable: Debian's /bin/sh (dash) reads
// "kill -TERM -- -pid" as a bad number and signals nothing, which left a
// stopped upgrade's kubeadm running: its own 5-minute wait then ended in
// rollbackOldManifests, which moved its old manifest over the next
// upgrade's new one.
const stopGroupScript = `f=$1 want=$2
p=$(cat "$f" 2>/dev/null) || exit 0
case $p in ''|*[!0-9]*) rm -f "$f"; exit 0;; esac
st=$(cat /proc/"$p"/stat 2>/dev/null) || st=
set -- ${st##*) }
cl=$(tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null) || cl=
case $cl in "$want "*|*"$f"*) ;; *) rm -f "$f"; exit 0;; esac
[ "$3" = "$p" ] || { rm -f "$f"; exit 0; }
alive() {
  for s in /proc/[0-9]*/stat; do
    { read -r l < "$s"; } 2>/dev/null || continue
    set -- ${l##*) }
    [ "$3" = "$p" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
kill -s TERM -- "-$p" 2>/dev/null || true
i=0; while alive && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if alive; then
  kill -s KILL -- "-$p" 2>/dev/null || true
  i=0; while alive && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  if alive; then echo "process group $p still runs after SIGKILL" >&2; exit 1; fi
fi
rm -f "$f"
echo stopped
`

// stopKubeadm stops the kubeadm process group UpgradeMaster started
// (stopGroupScript) and, given its command's channel, waits for the
// command to return. It fails when the group could not be stopped.
func (f *Flavor) stopKubeadm(ctx context.Context, m string, done <-chan error) error {
	out, stderr, err := f.m.RunOnMachine(ctx, m, "sh -c "+remote.ShellQuote(stopGroupScript)+" stop "+upgradePIDFile+" "+remote.ShellQuote("kubeadm upgrade"))
	if err != nil {
		err = fmt.Errorf("stop the kubeadm upgrade on %s (process group in %s): %w (stderr: %s)", m, upgradePIDFile, err, tail(stderr))
		f.log.Warn("stop kubeadm", "machine", m, "err", err)
	} else if strings.TrimSpace(string(out)) == "stopped" {
		f.log.Info("stopped kubeadm upgrade", "machine", m)
	}
	if done != nil {
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			f.log.Warn("kubeadm's SSH command did not return after it was stopped", "machine", m)
		}
	}
	return err
}

// localGet is an anonymous GET of path on m's own apiserver, by curl on
// the master (kubeadm's install page has the operator install it), to
// its loopback, the serving certificate verified against the master's
// CA for the name every kubeadm apiserver certificate carries
// ("kubernetes": GetAPIServerAltNames). /livez, /readyz and /version are
// readable without credentials (system:public-info-viewer). A refused
// connection is code 0, no error: the provider's tunnels are not used,
// since a failed dial drops the SSH connection kubeadm runs on.
func (f *Flavor) localGet(ctx context.Context, m, path string) (int, []byte, error) {
	port := strconv.Itoa(DefaultBindPort)
	cmd := "curl -s --max-time 3 --cacert " + CACert + " --resolve kubernetes:" + port + ":127.0.0.1 -w '\\n%{http_code}' https://kubernetes:" + port + path + " || true"
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), m, cmd)
	if err != nil {
		return 0, nil, err
	}
	body := strings.TrimRight(string(out), "\n")
	i := strings.LastIndex(body, "\n")
	code, _ := strconv.Atoi(body[i+1:])
	if i < 0 {
		return code, nil, nil
	}
	return code, []byte(body[:i]), nil
}

func (f *Flavor) livez(ctx context.Context, m string) bool {
	code, _, err := f.localGet(ctx, m, "/livez")
	return err == nil && code == http.StatusOK
}

// waitAPIServer waits until m's apiserver answers /readyz and /version
// reports v.
func (f *Flavor) waitAPIServer(ctx context.Context, m, v string) error {
	var last error
	err := wait.Until(ctx, 250*time.Millisecond, fmt.Sprintf("%s's apiserver ready at %s", m, v), func() (bool, error) {
		if code, body, err := f.localGet(ctx, m, "/readyz"); err != nil || code != http.StatusOK {
			last = fmt.Errorf("/readyz: %d %v %s", code, err, strings.TrimSpace(string(body)))
			return false, nil
		}
		code, body, err := f.localGet(ctx, m, "/version")
		if err != nil || code != http.StatusOK {
			last = fmt.Errorf("/version: %d %v", code, err)
			return false, nil
		}
		var info struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal(body, &info); err != nil {
			last = fmt.Errorf("/version: %w", err)
			return false, nil
		}
		if info.GitVersion != v {
			last = fmt.Errorf("/version reports %s", info.GitVersion)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// restoreScript puts the backup back: the certificates and
// kubeconfigs, the kubelet's configuration, then the manifests, each
// file renamed into place whole (the kubelet never reads one half
// written). $1 is the backup directory; $2 "keep-etcd" keeps the
// current etcd manifest, else ("all") the old one goes back, on the
// data etcdDataScript restored first when kubeadm had copied it (the old
// etcd never starts on data the upgraded one touched).
const restoreScript = `set -e
B=$1
[ "$2" = keep-etcd ] && rm -f "$B/manifests/etcd.yaml"
K=/etc/kubernetes
rm -rf "$K/.hamaster-pki"; cp -a "$B/pki" "$K/.hamaster-pki"
rm -rf "$K/.hamaster-pki-old"; [ -d "$K/pki" ] && mv "$K/pki" "$K/.hamaster-pki-old"
mv "$K/.hamaster-pki" "$K/pki"; rm -rf "$K/.hamaster-pki-old"
for f in "$B"/conf/*.conf; do [ -e "$f" ] || continue; n=$(basename "$f"); cp -a "$f" "$K/.$n.hamaster"; mv -f "$K/.$n.hamaster" "$K/$n"; done
for f in "$B"/kubelet/*; do [ -e "$f" ] || continue; n=$(basename "$f"); cp -a "$f" "/var/lib/kubelet/.$n.hamaster"; mv -f "/var/lib/kubelet/.$n.hamaster" "/var/lib/kubelet/$n"; done
mkdir -p "$K/manifests"
for f in "$K"/manifests/*; do [ -e "$f" ] || continue; n=$(basename "$f"); [ "$2" = keep-etcd ] && [ "$n" = etcd.yaml ] && continue; [ -e "$B/manifests/$n" ] || rm -f "$f"; done
for f in "$B"/manifests/*; do n=$(basename "$f"); cp -a "$f" "$K/.$n.hamaster"; mv -f "$K/.$n.hamaster" "$K/manifests/$n"; done
`

// kubeadm's etcd data backup: `kubeadm upgrade` copies the running data
// dir (ClusterConfiguration etcd.local.dataDir) to
// <KubernetesDir>/tmp/kubeadm-backup-etcd-<YYYY-MM-DD-HH-MM-SS>/etcd
// before it writes the new etcd manifest
// (cmd/kubeadm/app/phases/upgrade/staticpods.go
// performEtcdStaticPodUpgrade; the directory is
// StaticPodPathManager.BackupEtcdDir), and copies it back over the data
// dir when the new etcd fails (rollbackEtcdData, with
// rollbackOldManifests(…, restoreEtcd=true)). It does not get there when
// it is stopped first (stopKubeadm); etcdDataScript does what it would
// have done.
const (
	kubeadmTmpDir = "/etc/kubernetes/tmp"
	// etcdStopQuiet is how many checks a second apart must see no etcd
	// on the data dir once its manifest is moved out, and etcdStopBound
	// how many checks etcdDataScript makes at most: the kubelet stops a
	// static pod whose manifest went within its file check (inotify for
	// the real kubelet, a second for the test bed's), after the pod's
	// grace (kubeadm's etcd pod sets none: 30 s).
	etcdStopQuiet = 5
	etcdStopBound = 120
)

// etcdDataScript restores kubeadm's etcd data backup of this upgrade,
// before restoreScript puts the old etcd manifest back: the newest
// $2/tmp/kubeadm-backup-etcd-*/etcd younger than the backup $1 (its
// target file: made before kubeadm ran), onto the data dir of the old
// manifest ($1/manifests/etcd.yaml's --data-dir, kubeadm's default
// /var/lib/etcd). Without one (kubeadm's etcd phase did not copy the
// data, or restored it itself and dropped nothing since) it prints
// "none" and changes nothing.
//
// The upgraded etcd is stopped first, its manifest moved out of $2's
// manifests into $1 (etcd.yaml.upgraded), and waited for: no process
// of this host's network namespace (kubeadm's etcd is hostNetwork; the
// lab's hosts share one pid namespace) runs with --data-dir=<data dir>
// in $3 consecutive checks a second apart, at most $4 checks (the
// grep's pattern is not its own argument: "[=]"). Unlike kubeadm's
// rollbackEtcdData, which copies the backup over the data dir in
// place, the touched data is moved aside whole and kept (the operator
// may need it), and the backup copied (cp -a: modes kept; etcd wants
// 0700) beside it, then renamed into place: the data dir renamed to
// <data dir>.hamaster-rollback-<UTC time>; or, when the data dir is a
// mount point (a disk of its own, or a bind mount, as the lab's), which
// cannot be renamed, its entries moved into
// <data dir>/hamaster-rollback-<UTC time> (etcd warns of the extra
// directory and starts) and the copy's entries moved in. $5 "inside"
// takes the second way whatever the data dir (tests).
//
// A marker in $1 (etcd-data: "<phase> <backup> <aside>") makes a re-run
// after a crash resume: "swap" while the touched data moves aside,
// "fill" while the copy goes in (what a crashed fill left in the data
// dir is removed: the touched data is in the aside dir by then),
// "done" after, which prints "done <backup> <aside>" and changes
// nothing (a second rollback does not restore twice). It prints
// "restored <backup> <aside>" when it restored.
const etcdDataScript = `set -e
B=$1 K=$2 quiet=$3 bound=$4 how=$5
M=$B/etcd-data
D=$(sed -n 's/^[[:space:]-]*--data-dir=//p' "$B/manifests/etcd.yaml" | head -n 1 | tr -d "\"' \r")
D=${D:-/var/lib/etcd}
case $D in /?*) D=${D%/};; *) echo "etcd data dir '$D': not an absolute path" >&2; exit 2;; esac
mark() { echo "$1 $E $A" > "$M.tmp"; sync; mv -f "$M.tmp" "$M"; st=$1; }
if [ -f "$M" ]; then
  read -r st E A < "$M"
  if [ "$st" = done ]; then echo "done $E $A"; exit 0; fi
else
  E=$(find "$K/tmp" -mindepth 2 -maxdepth 2 -type d -name etcd -path "$K/tmp/kubeadm-backup-etcd-*" -newer "$B/target" 2>/dev/null | sort | tail -n 1)
  [ -n "$E" ] || { echo none; exit 0; }
  t=hamaster-rollback-$(date -u +%Y%m%dT%H%M%SZ)
  if [ "$how" = inside ] || awk -v d="$D" '$5 == d { f = 1 } END { exit !f }' /proc/self/mountinfo; then
    A=$D/$t
  else
    A=$D.$t
  fi
  mark swap
fi
case $A in "$D"/*) inside=1 S=$D/.hamaster-restoring;; *) inside= S=$D.hamaster-restoring;; esac
[ -e "$K/manifests/etcd.yaml" ] && mv -f "$K/manifests/etcd.yaml" "$B/etcd.yaml.upgraded"
me=$(readlink /proc/self/ns/net)
runs() {
  for c in $(grep -lsa -e "-data-dir[=]$D" /proc/[0-9]*/cmdline); do
    p=${c%/cmdline}
    case " $(tr '\0' ' ' < "$c" 2>/dev/null) " in *" --data-dir=$D "*) ;; *) continue;; esac
    [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$me" ] && return 0
  done
  return 1
}
q=0 n=0
while :; do
  if runs; then q=0; else q=$((q+1)); fi
  [ $q -ge "$quiet" ] && break
  n=$((n+1))
  [ $n -lt "$bound" ] || { echo "etcd still runs on $D after its manifest was moved to $B/etcd.yaml.upgraded" >&2; exit 1; }
  sleep 1
done
# entries lists a directory's entries, dot files too, without . and ..
entries() { ls -A1 "$1"; }
if [ "$st" = swap ]; then
  [ -d "$E" ] || { echo "kubeadm's etcd backup $E is gone; etcd's data is untouched in $D" >&2; exit 1; }
  if [ -n "$inside" ]; then
    mkdir -p "$A"
    for x in $(entries "$D"); do
      [ "$D/$x" = "$A" ] || [ "$D/$x" = "$S" ] || mv "$D/$x" "$A/"
    done
  elif [ ! -e "$A" ] && [ -e "$D" ]; then
    mv "$D" "$A"
  fi
  mark fill
fi
gone="kubeadm's etcd backup $E is gone; the upgraded etcd's data is kept in $A"
if [ -n "$inside" ]; then
  # The copy's entries appear in the data dir only once it is whole, and
  # it goes once they all moved: without it, an entry means filled.
  others=
  for x in $(entries "$D"); do [ "$D/$x" = "$A" ] || others=1; done
  if [ -e "$S" ] || [ -z "$others" ]; then
    [ -d "$E" ] || { echo "$gone" >&2; exit 1; }
    for x in $(entries "$D"); do
      [ "$D/$x" = "$A" ] || [ "$D/$x" = "$S" ] || rm -rf "$D/$x"
    done
    rm -rf "$S"; cp -a "$E" "$S"; sync
    for x in $(entries "$S"); do mv "$S/$x" "$D/"; done
    rmdir "$S"
  fi
  chmod 700 "$D"
elif [ ! -e "$D" ]; then
  [ -d "$E" ] || { echo "$gone" >&2; exit 1; }
  rm -rf "$S"; cp -a "$E" "$S"; chmod 700 "$S"; sync
  mv "$S" "$D"
fi
mark done
echo "restored $E $A"
`

// etcdDataCommand is etcdDataScript on backup dir b, Kubernetes dir k.
func etcdDataCommand(b, k string, quiet, bound int) string {
	return "sh -c " + remote.ShellQuote(etcdDataScript) + " etcd-data " + remote.ShellQuote(b) + " " + remote.ShellQuote(k) + " " + strconv.Itoa(quiet) + " " + strconv.Itoa(bound) + " auto"
}

// restoreEtcdData runs etcdDataScript on m, for an upgraded etcd that is
// not healthy, and logs what it did.
func (f *Flavor) restoreEtcdData(ctx context.Context, m string) error {
	out, stderr, err := f.m.RunOnMachine(ctx, m, etcdDataCommand(UpgradeBackupDir, "/etc/kubernetes", etcdStopQuiet, etcdStopBound))
	if err != nil {
		return fmt.Errorf("restore kubeadm's etcd data backup on %s: %w (stderr: %s)", m, err, tail(stderr))
	}
	fs := strings.Fields(string(out))
	switch {
	case len(fs) == 3 && fs[0] == "restored":
		f.log.Warn("restored etcd's data from kubeadm's backup of this upgrade; the upgraded etcd's data is kept aside", "machine", m, "backup", fs[1], "kept", fs[2])
	case len(fs) == 3 && fs[0] == "done":
		f.log.Info("etcd's data was restored by an earlier rollback", "machine", m, "backup", fs[1], "kept", fs[2])
	case len(fs) == 1 && fs[0] == "none":
		f.log.Info("etcd's data not restored: no kubeadm etcd backup of this upgrade (kubeadm's etcd phase did not touch the data, or restored it itself)", "machine", m, "dir", kubeadmTmpDir)
	default:
		return fmt.Errorf("restore kubeadm's etcd data backup on %s: unexpected output %q", m, out)
	}
	return nil
}

// RollbackMaster implements flavors.Upgrader: with a backup on
// replica, a kubeadm still running stopped, the packages of the backup's
// versions installed, its files restored (restoreScript; an upgraded
// etcd that is healthy is kept, as kubeadm keeps it; one that is not
// goes back to its old manifest and, first, to kubeadm's copy of its
// data made by this upgrade when there is one: etcdDataScript, the
// touched data kept aside and logged), the kubelet
// restarted, the apiserver waited for at the backup's version, then
// (first, when the backup has them) kubeadm-config and kubelet-config
// replaced by the backup's, the addons kubeadm rewrote since the backup
// put back (addons.go), and the backup dropped. Without a backup,
// nothing.
func (f *Flavor) RollbackMaster(ctx context.Context, replica providers.Replica, first bool) error {
	m := replica.Name
	out, stderr, err := f.m.RunOnMachine(ctx, m, "B="+UpgradeBackupDir+"; if [ -d $B ]; then cat $B/target $B/kubeadm-version $B/kubelet-version $B/first; else rm -rf $B.tmp; echo none; fi")
	if err != nil {
		return fmt.Errorf("read the upgrade backup on %s: %w (stderr: %s)", m, err, tail(stderr))
	}
	lines := strings.Fields(string(out))
	if len(lines) == 1 && lines[0] == "none" {
		f.log.Info("no upgrade backup; nothing to roll back", "machine", m)
		return nil
	}
	if len(lines) != 4 {
		return fmt.Errorf("upgrade backup on %s is damaged: %q", m, out)
	}
	target, kubeadmV, kubeletV, savedFirst := lines[0], lines[1], lines[2], lines[3] == "first"
	man, err := f.read(ctx, m, UpgradeBackupDir+"/manifests/kube-apiserver.yaml")
	if err != nil {
		return err
	}
	prev, err := ManifestVersion(man[0])
	if err != nil {
		return fmt.Errorf("upgrade backup on %s: kube-apiserver.yaml: %w", m, err)
	}
	f.log.Info("rolling back", "machine", m, "from", target, "to", prev)
	if err := f.stopKubeadm(ctx, m, nil); err != nil {
		return err
	}
	etcdChanged, etcdHealthy, err := f.etcdState(ctx, m)
	if err != nil {
		return err
	}
	keepEtcd := etcdChanged && etcdHealthy
	if err := f.install(ctx, m, kubeadmV, "kubeadm"); err != nil {
		return err
	}
	if err := f.install(ctx, m, kubeletV, "kubelet", "kubectl"); err != nil {
		return err
	}
	mode := "all"
	if keepEtcd {
		// As kubeadm's own rollback does (staticpods.go
		// rollbackOldManifests restores etcd's manifest only with
		// restoreEtcd: "if an Etcd upgrade is successful, but the
		// apiserver upgrade fails, Etcd is not rolled back"): etcd does
		// not run an older minor on data a newer one wrote (its
		// downgrade is a procedure of its own), and serves older
		// apiservers.
		mode = "keep-etcd"
		f.log.Info("keeping the upgraded etcd, which is healthy", "machine", m)
	} else if etcdChanged {
		// The upgraded etcd is not healthy: its old manifest goes back
		// (restoreScript), and the data it was started on with it.
		if err := f.restoreEtcdData(ctx, m); err != nil {
			return err
		}
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, m, "sh -c "+remote.ShellQuote(restoreScript)+" restore "+UpgradeBackupDir+" "+mode); err != nil {
		return fmt.Errorf("restore the upgrade backup on %s: %w (stderr: %s)", m, err, tail(stderr))
	}
	if err := f.restartKubelet(ctx, m); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, RollbackTimeout)
	defer cancel()
	if err := f.waitAPIServer(wctx, m, prev); err != nil {
		return fmt.Errorf("master %s restored to %s: %w", m, prev, err)
	}
	// What follows goes through admin.conf's endpoint, which a sole
	// master's VIP left while its apiserver restarted (seen in
	// TestMetalKubeadmRecover's rollback: "no route to host").
	if err := f.waitEndpoint(ctx, m, RollbackTimeout); err != nil {
		return fmt.Errorf("master %s restored to %s: %w", m, prev, err)
	}
	if first && savedFirst {
		// Each key put back as saved, the rest of the object kept (its
		// annotations: former.go's former endpoints).
		var errs []error
		for _, cm := range []struct{ name, key, file string }{
			{"kubeadm-config", "ClusterConfiguration", "kubeadm-config.yaml"},
			{"kubelet-config", "kubelet", "kubelet-config.yaml"},
		} {
			saved, err := f.read(ctx, m, UpgradeBackupDir+"/"+cm.file)
			if err == nil {
				err = f.editConfigMap(ctx, m, "kube-system", cm.name, cm.key, func(cur []byte) ([]byte, bool, error) {
					return saved[0], !bytes.Equal(cur, saved[0]), nil
				})
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	if err := f.restoreAddons(ctx, m); err != nil {
		return err
	}
	return f.FinishUpgrade(ctx, replica)
}

// EtcdHealthURL is a kubeadm etcd's own health, on the master's
// loopback (GetEtcdPodSpec: --listen-metrics-urls=http://127.0.0.1:2381,
// the URL of its liveness probe).
const EtcdHealthURL = "http://127.0.0.1:2381/health"

// etcdState reports whether m's etcd manifest was changed by the
// upgrade (or is missing: a rollback that stopped etcd, then crashed)
// and whether its etcd is healthy. A changed etcd that is healthy,
// RollbackMaster keeps; a changed one that is not, it rolls back, its
// data too when kubeadm backed that up (restoreEtcdData).
func (f *Flavor) etcdState(ctx context.Context, m string) (changed, healthy bool, err error) {
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), m, "cmp -s "+UpgradeBackupDir+"/manifests/etcd.yaml /etc/kubernetes/manifests/etcd.yaml && echo same; curl -s --max-time 3 "+EtcdHealthURL+" || true")
	if err != nil {
		return false, false, fmt.Errorf("etcd on %s: %w", m, err)
	}
	s := string(out)
	return !strings.HasPrefix(s, "same"), strings.Contains(s, `"health":"true"`), nil
}

// FinishUpgrade implements flavors.Upgrader: the backup removed (and
// RenewCerts' RestartDir).
func (f *Flavor) FinishUpgrade(ctx context.Context, replica providers.Replica) error {
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "rm -rf "+UpgradeBackupDir+" "+UpgradeBackupDir+".tmp "+upgradeLogFile+" "+RestartDir); err != nil {
		return fmt.Errorf("drop the upgrade backup on %s: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	return nil
}
