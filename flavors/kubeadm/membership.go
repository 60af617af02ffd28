package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// adminKubectl runs kubectl on a master with kubeadm's admin.conf, as the
// operator does there.
const adminKubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf "

// ClusterConfigurationOf reads kube-system/kubeadm-config's
// ClusterConfiguration through master's admin.conf.
func (f *Flavor) ClusterConfigurationOf(ctx context.Context, master string) ([]byte, ClusterConfiguration, error) {
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, adminKubectl+"-n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'")
	if err != nil {
		return nil, ClusterConfiguration{}, fmt.Errorf("read kubeadm-config on %s: %w", master, err)
	}
	c, err := ParseClusterConfiguration(out)
	return out, c, err
}

// JoinTimeout bounds `kubeadm join --control-plane`: kubeadm's own waits
// (discovery 5 min, the kubelet's TLS bootstrap 5 min, etcd) are longer
// than a healthy join needs; hamaster gives up sooner and cleans up.
const JoinTimeout = 4 * time.Minute

// Join makes replica (claimed, reachable, nothing of a control plane on
// it) a master with the real `kubeadm join --control-plane`, run on it
// over the provider's way in, as kubeadm's HA guide has the operator do
// (docs: "Steps for the rest of the control plane nodes"): on a running
// master, a bootstrap token (kubeadm token create) and the control-plane
// certificates uploaded under a fresh key (kubeadm init phase
// upload-certs --upload-certs --certificate-key); on the new one, kubeadm
// join, which adds its etcd member as a learner and promotes it once
// caught up (cmd/kubeadm/app/phases/etcd/local.go
// CreateStackedEtcdStaticPodManifestFile).
//
// What kubeadm leaves to the operator, Join does: a join that fails or
// runs past timeout leaves no member of the replica in etcd (its learner
// removed through another master: cluster-api#13221, rke2#347 — an
// orphan learner blocks every later join), no Node, and a host kubeadm
// reset cleans, so add-replica can run again.
//
// One failure of kubeadm's own is joined again, once, after its undo: a
// learner's promotion that etcd applied while kubeadm's call timed out
// (a busy host), which kubeadm v1.33 and v1.34 retry until etcd-join
// fails with "can only promote a learner member" (kubeadm#3317; fixed
// in kubernetes#139842: MemberPromote now checks again whether the member
// is still a learner). The member was a voter by then: nothing about the
// machine or the cluster refused it.
func (f *Flavor) Join(ctx context.Context, replica providers.Replica, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = JoinTimeout
	}
	err := f.joinOnce(ctx, replica, timeout)
	var lost *lostPromotion
	if errors.As(err, &lost) && ctx.Err() == nil {
		f.log.Warn("kubeadm join failed after etcd promoted its learner (kubeadm#3317); the join was undone: joining again once", "replica", replica.Name)
		return f.joinOnce(ctx, replica, timeout)
	}
	return err
}

// lostPromotion is a join that kubeadm failed at etcd-join with "can
// only promote a learner member" (kubeadm#3317), undone.
type lostPromotion struct{ err error }

func (l *lostPromotion) Error() string { return l.err.Error() }
func (l *lostPromotion) Unwrap() error { return l.err }

// promotionLost reports whether kubeadm join's output says it failed its
// etcd-join phase on a learner already promoted: kubeadm's last error
// line ends with etcd's ErrMemberNotLearner ("etcdserver: can only
// promote a learner member"), not with ErrLearnerNotReady ("... which is
// in sync with leader": a learner that never caught up).
func promotionLost(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "error execution phase etcd-join") && strings.HasSuffix(line, "etcdserver: can only promote a learner member") {
			return true
		}
	}
	return false
}

// joinOnce is one attempt of Join: kubeadm join, undone when it fails.
func (f *Flavor) joinOnce(ctx context.Context, replica providers.Replica, timeout time.Duration) error {
	source, err := f.firstRunning(ctx, "join "+replica.Name+" to", replica.Name)
	if err != nil {
		return err
	}
	_, cfg, err := f.ClusterConfigurationOf(ctx, source)
	if err != nil {
		return err
	}
	if cfg.ControlPlaneEndpoint == "" {
		return errkind.Errorf(errkind.FailedPrecondition, "the cluster has no controlPlaneEndpoint: kubeadm joins no control-plane node to it (convert it to HA first: its endpoint moved to the VIP or LB)")
	}
	ep, _ := SplitEndpoint(cfg.ControlPlaneEndpoint)
	if ep.Port == 0 {
		ep.Port = DefaultBindPort
	}
	ca, err := f.read(ctx, source, CACert)
	if err != nil {
		return err
	}
	hash, err := CACertHash(ca[0])
	if err != nil {
		return fmt.Errorf("master %s: %w", source, err)
	}
	token, err := NewToken()
	if err != nil {
		return err
	}
	key, err := NewCertificateKey()
	if err != nil {
		return err
	}
	// The token lives as long as a join may take; the uploaded
	// certificates expire with kubeadm's own 2 h bound.
	if _, _, err := f.m.RunOnMachine(ctx, source, fmt.Sprintf("kubeadm token create %s --ttl %s --description %s", token, (timeout+5*time.Minute).Round(time.Minute), remote.ShellQuote("hamaster add-replica "+replica.Name))); err != nil {
		return fmt.Errorf("kubeadm token create on %s: %w", source, err)
	}
	if _, _, err := f.m.RunOnMachine(ctx, source, "kubeadm init phase upload-certs --upload-certs --certificate-key "+key); err != nil {
		return fmt.Errorf("kubeadm init phase upload-certs on %s: %w", source, err)
	}
	j := Join{Endpoint: ep.String(), Token: token, CAHash: hash, CertificateKey: key,
		NodeName: f.m.MachineHostname(replica.Name, replica.Address), AdvertiseAddress: replica.Address, BindPort: DefaultBindPort}
	if err := j.Validate(); err != nil {
		return err
	}
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f.log.Info("kubeadm join", "replica", replica.Name, "command", j.Redacted())
	// The join's pid is recorded (exec keeps the shell's) so that Leave
	// stops this join and no other process.
	_, stderr, jerr := f.m.RunOnMachine(jctx, replica.Name, "mkdir -p "+path.Dir(JoinPIDFile)+" && echo $$ > "+JoinPIDFile+" && exec kubeadm "+strings.Join(quoteAll(j.Args()), " "))
	if jerr == nil {
		return nil
	}
	// The SSH error quotes the command: not its token's secret half nor
	// the certificate key.
	jerr = redact(jerr, token, key)
	if jctx.Err() != nil && ctx.Err() == nil {
		jerr = fmt.Errorf("kubeadm join on %s did not finish within %v: %w", replica.Name, timeout, jerr)
	} else {
		jerr = fmt.Errorf("kubeadm join on %s: %w (stderr: %s)", replica.Name, jerr, tail(stderr))
	}
	// Undo with a fresh bound: the join's own may be what ran out.
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer ucancel()
	if uerr := f.undoJoin(uctx, replica); uerr != nil {
		return errors.Join(jerr, fmt.Errorf("undo the failed join of %s: %w", replica.Name, uerr))
	}
	if promotionLost(string(stderr)) {
		return &lostPromotion{err: jerr}
	}
	return jerr
}

// undoJoin removes whatever a failed join left: the replica's member (a
// learner or a voter) through the other masters, its Node, and its
// kubeadm state (kubeadm reset, which now finds no member of its own).
func (f *Flavor) undoJoin(ctx context.Context, replica providers.Replica) error {
	var errs []error
	if err := f.RemoveMember(ctx, replica); err != nil {
		errs = append(errs, err)
	}
	if err := f.Leave(ctx, replica); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RemoveMember removes replica's etcd member (found by its peer URL or
// its name) through the other masters; absent is success.
func (f *Flavor) RemoveMember(ctx context.Context, replica providers.Replica) error {
	cli, err := f.EtcdCluster(ctx, flavors.EtcdMain, replica.Name)
	if err != nil {
		return err
	}
	defer cli.Close()
	ms, err := cli.Members(ctx)
	if err != nil {
		return err
	}
	name, peer := f.EtcdMember(flavors.EtcdMain, replica.Name, replica.Address)
	for _, m := range ms {
		if m.Name == name || (len(m.PeerURLs) > 0 && m.PeerURLs[0] == peer) {
			if err := cli.Remove(ctx, m.ID); err != nil && !errors.Is(err, errkind.NotFound) {
				return fmt.Errorf("remove etcd member %s (%s) of %s: %w", m.Name, m.IDHex(), replica.Name, err)
			}
		}
	}
	return nil
}

// Leave undoes kubeadm on replica once its etcd member is gone: `kubeadm
// reset -f` on it (which, with no member of its own left, neither
// retries nor touches the live cluster: kubeadm#3225, #2144), then its
// Node deleted through another master (kubeadm reset never does).
func (f *Flavor) Leave(ctx context.Context, replica providers.Replica) error {
	var errs []error
	// A join whose caller died (hamaster killed mid-join) may still run
	// on the host: it is stopped first, so reset does not race it.
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, stopJoin+"; "+restoreAPIServer+"; "+resetAndClean); err != nil {
		errs = append(errs, fmt.Errorf("kubeadm reset on %s: %w (stderr: %s)", replica.Name, err, tail(stderr)))
	}
	others, err := f.running(ctx, replica.Name)
	if err != nil {
		errs = append(errs, err)
	} else if len(others) > 0 {
		node := f.m.MachineHostname(replica.Name, replica.Address)
		if _, _, err := f.m.RunOnMachine(ctx, others[0].Name, adminKubectl+"delete node --ignore-not-found "+remote.ShellQuote(node)); err != nil {
			errs = append(errs, fmt.Errorf("delete Node %s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}

// JoinPIDFile is where Join records its kubeadm join's pid on the
// machine.
const JoinPIDFile = "/var/lib/hamaster/kubeadm-join.pid"

// joinRuns succeeds while the kubeadm join Join recorded still runs: the
// pid names a process whose command line is kubeadm join (not a pid
// reused since). Not a pgrep by pattern: where machines share one process
// namespace (the test beds' hosts and VMs) that would find every host's
// join.
const joinRuns = `{ pid=$(cat ` + JoinPIDFile + ` 2>/dev/null); case "$pid" in ''|*[!0-9]*) false;; *) tr '\0' ' ' < /proc/"$pid"/cmdline 2>/dev/null | grep -q '^kubeadm join ';; esac; }`

// stopJoin kills the kubeadm join Join recorded, when it still runs.
const stopJoin = `if ` + joinRuns + `; then kill -KILL "$pid"; fi
rm -f ` + JoinPIDFile

// waitJoin waits for the kubeadm join Join recorded to end, when it still
// runs (its caller bounds the wait).
const waitJoin = `while ` + joinRuns + `; do sleep 1; done`

// Joined reports whether replica's join completed, for an add resumed
// after hamaster died mid-join. The join hamaster started goes on on the
// machine without it (it may finish, or die at its next write to the
// closed session), so Joined waits for the recorded one to end, bounded
// by timeout (0: JoinTimeout), then asks whether replica's Node carries
// the control-plane label that kubeadm join's last phase sets
// (cmd/kubeadm/app/cmd/phases/join/controlplanejoin.go
// runMarkControlPlanePhase, after the etcd phase that made its member a
// voter). false: the join stopped before that phase (or hamaster cannot
// tell), and the caller undoes it and joins again.
func (f *Flavor) Joined(ctx context.Context, replica providers.Replica, timeout time.Duration) (bool, error) {
	if timeout <= 0 {
		timeout = JoinTimeout
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, stderr, err := f.m.RunOnMachine(wctx, replica.Name, waitJoin); err != nil {
		return false, fmt.Errorf("wait for the interrupted kubeadm join on %s to end: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	source, err := f.firstRunning(ctx, "read the Node of "+replica.Name+" on", replica.Name)
	if err != nil {
		return false, err
	}
	node := f.m.MachineHostname(replica.Name, replica.Address)
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), source, adminKubectl+"get nodes -l node-role.kubernetes.io/control-plane -o name")
	if err != nil {
		return false, fmt.Errorf("list the control-plane Nodes on %s: %w", source, err)
	}
	return slices.Contains(strings.Fields(string(out)), "node/"+node), nil
}

// resetAndClean runs kubeadm reset -f, then empties the etcd data
// directory the etcd manifest named: kubeadm reset keeps it when it did
// not remove the member itself (cmd/kubeadm/app/cmd/phases/reset
// removeetcdmember.go: CleanDir only after its own
// RemoveStackedEtcdMemberFromCluster succeeded, the fix for
// kubeadm#3225), and Leave runs only once hamaster has removed the
// member through the other masters.
const resetAndClean = `d=$(sed -n 's/^ *- --data-dir=//p' /etc/kubernetes/manifests/etcd.yaml 2>/dev/null | head -n 1)
kubeadm reset -f; rc=$?
case "$d" in /?*) if [ -d "$d" ]; then find "$d" -mindepth 1 -delete; fi;; esac
exit $rc`

func quoteAll(a []string) []string {
	out := make([]string, len(a))
	for i, s := range a {
		out[i] = remote.ShellQuote(s)
	}
	return out
}

// tail is the last lines of a command's stderr, for an error.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if lines := strings.Split(s, "\n"); len(lines) > 5 {
		s = strings.Join(lines[len(lines)-5:], "\n")
	}
	return s
}

// redacted is an error whose message has secrets replaced; it unwraps to
// the original.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// redact replaces the secret half of token and key in err's message by
// "<redacted>".
func redact(err error, token, key string) error {
	msg := err.Error()
	if _, secret, ok := strings.Cut(token, "."); ok && secret != "" {
		msg = strings.ReplaceAll(msg, secret, "<redacted>")
	}
	if key != "" {
		msg = strings.ReplaceAll(msg, key, "<redacted>")
	}
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}
