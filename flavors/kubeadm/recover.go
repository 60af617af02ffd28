package kubeadm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/nodebin"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Disaster recovery of a kubeadm master's stacked etcd (hamaster recover),
// as the Kubernetes documentation lays it out for a cluster that lost
// quorum ("Operating etcd clusters for Kubernetes": "Restoring an etcd
// cluster", and etcd's own "Disaster recovery" guide): the master's etcd
// stopped (its static pod manifest moved out of the kubelet's path), etcd
// started once with --force-new-cluster on the member's own data (every
// key kept, same cluster ID, the other members removed) or its data
// directory replaced by a restore of a snapshot (`etcdutl snapshot
// restore`: hash verified, one member, a new cluster ID), then the
// original manifest put back; after a restore the apiserver, the
// controller-manager and the scheduler are restarted on it. kubeadm
// itself has no command for it.

var _ flavors.Recoverer = (*Flavor)(nil)

// Paths of a recovery on a master.
const (
	// EtcdManifest is the stacked etcd's static pod
	// (cmd/kubeadm/app/phases/etcd/local.go CreateLocalEtcdStaticPodManifestFile).
	EtcdManifest = "/etc/kubernetes/manifests/etcd.yaml"
	// RecoverDir keeps the master's original etcd manifest while a
	// recovery runs (a re-run puts it back from there), where the data
	// went aside, and the uploaded snapshot restore.
	RecoverDir = "/var/lib/hamaster/recover"
)

// AsideDir is the prefix of the copies of a master's etcd data a
// recovery keeps (<AsideDir>-before-force-new-cluster-<unix time>,
// -before-restore-): beside hamaster's other files on the master, as
// kubeadm's upgrade keeps its copy of the etcd data under its own
// directory (cmd/kubeadm/app/phases/upgrade/staticpods.go:
// kubeadm-backup-etcd-<time> under /etc/kubernetes/tmp).
const AsideDir = "/var/lib/hamaster/etcd"

// copyAside is the shell that copies the data directory $d's contents to
// $a whole or not at all (a copy renamed into place).
const copyAside = `[ -e "$a" ] || { rm -rf "$a.tmp"; mkdir -p -m 700 "$a.tmp"; cp -a "$d/." "$a.tmp/"; mv "$a.tmp" "$a"; }`

// RecoverTimeout bounds each wait of a recovery: a stopped etcd gone
// (the kubelet's termination grace period), the rebuilt etcd serving.
const RecoverTimeout = 2 * time.Minute

// uploadChunk is the raw size of one piece of an upload over
// RunOnMachine: base64 of it must stay well under Linux's 128 KiB limit
// on one argument (MAX_ARG_STRLEN), the command line sshd hands to sh -c.
const uploadChunk = 64 << 10

// stopForRecovery saves the original etcd manifest once (RecoverDir)
// and stops etcd by removing it from the kubelet's path. The apiserver
// keeps running (not ready without etcd): the master stays listed as one
// (its manifest in place), and it reconnects to the rebuilt member.
var stopForRecovery = fmt.Sprintf(`set -e
D=%[1]s
mkdir -p "$D"
if [ ! -f "$D/etcd.yaml" ]; then
  [ -f %[2]s ] || { echo "no etcd manifest at %[2]s: not a stacked-etcd kubeadm master" >&2; exit 3; }
  cp -p %[2]s "$D/etcd.yaml.tmp" && mv -f "$D/etcd.yaml.tmp" "$D/etcd.yaml"
fi
rm -f %[2]s`, RecoverDir, EtcdManifest)

// ForceNewCluster implements flavors.Recoverer.
func (f *Flavor) ForceNewCluster(ctx context.Context, replica providers.Replica) (string, error) {
	orig, dataDir, err := f.stopForRecovery(ctx, replica)
	if err != nil {
		return "", err
	}
	// The data copied aside once per recovery (a re-run after the
	// rewrite must not copy rewritten data over it): its path is kept in
	// RecoverDir.
	keep := fmt.Sprintf(`set -e
d=%[1]s D=%[2]s
a=$(cat "$D/aside" 2>/dev/null || true)
if [ -z "$a" ]; then
  [ -n "$(ls -A "$d" 2>/dev/null)" ] || { echo "no etcd data in $d" >&2; exit 3; }
  a=%[3]s-before-force-new-cluster-$(date +%%s)
  %[4]s
  printf '%%s\n' "$a" > "$D/aside"
fi
printf '%%s\n' "$a"`, remote.ShellQuote(dataDir), RecoverDir, AsideDir, copyAside)
	out, stderr, err := f.m.RunOnMachine(ctx, replica.Name, keep)
	if err != nil {
		return "", fmt.Errorf("master %s: copy the etcd data aside: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	aside := strings.TrimSpace(string(out))
	forced, err := WithManifestFlag(orig, "--force-new-cluster")
	if err != nil {
		return "", fmt.Errorf("master %s: %w", replica.Name, err)
	}
	f.log.Info("kubeadm: etcd --force-new-cluster", "master", replica.Name, "data", dataDir, "kept aside", aside)
	if err := f.write(ctx, replica.Name, EtcdManifest, forced, 0o600); err != nil {
		return "", fmt.Errorf("master %s: write the etcd manifest with --force-new-cluster: %w", replica.Name, err)
	}
	if err := f.waitAlone(ctx, replica); err != nil {
		return "", err
	}
	return aside, f.restartRecovered(ctx, replica, false)
}

// RestoreSnapshot implements flavors.Recoverer: the snapshot is restored
// here, with etcd's own restore (etcdutl's snapshot package, which
// hamaster-node links: the file's hash verified first), into a one-member
// data directory for the master's member (its manifest's --name and
// --initial-advertise-peer-urls); it is then uploaded, and replaces the
// contents of the master's data directory, kept aside. The master needs
// no etcdutl.
func (f *Flavor) RestoreSnapshot(ctx context.Context, replica providers.Replica, snapshotPath string) (string, error) {
	orig, dataDir, err := f.stopForRecovery(ctx, replica)
	if err != nil {
		return "", err
	}
	done, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), replica.Name, "cat "+RecoverDir+"/restored 2>/dev/null || true")
	if err != nil {
		return "", fmt.Errorf("master %s: %w", replica.Name, err)
	}
	if strings.TrimSpace(string(done)) != snapshotPath {
		if err := f.restoreOnto(ctx, replica, orig, dataDir, snapshotPath); err != nil {
			return "", err
		}
	}
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), replica.Name, "cat "+RecoverDir+"/aside 2>/dev/null || true")
	if err != nil {
		return "", fmt.Errorf("master %s: %w", replica.Name, err)
	}
	aside := strings.TrimSpace(string(out))
	if err := f.putEtcdBack(ctx, replica); err != nil {
		return "", err
	}
	if err := f.waitAlone(ctx, replica); err != nil {
		return "", err
	}
	return aside, f.restartRecovered(ctx, replica, true)
}

func (f *Flavor) restoreOnto(ctx context.Context, replica providers.Replica, manifest []byte, dataDir, snapshotPath string) error {
	name, peer := ManifestFlag(manifest, "name"), ManifestFlag(manifest, "initial-advertise-peer-urls")
	if name == "" || peer == "" {
		return fmt.Errorf("master %s: its etcd manifest names no --name or --initial-advertise-peer-urls", replica.Name)
	}
	tmp, err := os.MkdirTemp("", "hamaster-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "etcd")
	// etcd's own restore lives in hamaster-node (the CLI does not link
	// the etcd server).
	bin, err := nodebin.Find(f.nodeBinary, EnvNodeBinary)
	if err != nil {
		return fmt.Errorf("restore snapshot %s: %w", snapshotPath, err)
	}
	cmd := exec.CommandContext(ctx, bin, "recover", "--snapshot", snapshotPath, "--name", name, "--peer-url", peer, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("restore snapshot %s (hash verified first): %s: %w: %s", snapshotPath, bin, err, strings.TrimSpace(string(b)))
	}
	archive, err := tarGz(out)
	if err != nil {
		return fmt.Errorf("pack the restored data: %w", err)
	}
	up := RecoverDir + "/restore.tar.gz"
	if err := f.upload(ctx, replica.Name, up, archive); err != nil {
		return fmt.Errorf("master %s: upload the restored data: %w", replica.Name, err)
	}
	// The old data is copied aside once (its path kept in RecoverDir),
	// then the data directory's contents replaced: the directory itself
	// stays (it may be a mount point: a disk of its own for etcd).
	swap := fmt.Sprintf(`set -e
d=%[1]s D=%[2]s R=%[2]s/restoring
rm -rf "$R"; mkdir -m 700 "$R"
tar -xzf "$D/restore.tar.gz" -C "$R"
a=$(cat "$D/aside" 2>/dev/null || true)
if [ -z "$a" ]; then
  a=%[4]s-before-restore-$(date +%%s)
  %[5]s
  printf '%%s\n' "$a" > "$D/aside"
fi
mkdir -p -m 700 "$d"
find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
cp -a "$R/." "$d/"
rm -rf "$R" "$D/restore.tar.gz"
printf '%%s\n' %[3]s > "$D/restored"`, remote.ShellQuote(dataDir), RecoverDir, remote.ShellQuote(snapshotPath), AsideDir, copyAside)
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, swap); err != nil {
		return fmt.Errorf("master %s: put the restored data in place: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	return nil
}

// stopForRecovery stops replica's etcd (stopForRecovery's script), waits
// until it no longer listens, and returns its original manifest and the
// data directory that manifest names.
func (f *Flavor) stopForRecovery(ctx context.Context, replica providers.Replica) (orig []byte, dataDir string, err error) {
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, stopForRecovery); err != nil {
		return nil, "", fmt.Errorf("master %s: stop its etcd: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	wctx, cancel := context.WithTimeout(ctx, RecoverTimeout)
	defer cancel()
	listening := fmt.Sprintf("ss -Hltn 'sport = :%d' | grep -c . || true", EtcdClientPort)
	if err := wait.Until(wctx, 250*time.Millisecond, "the etcd of "+replica.Name+" to stop", func() (bool, error) {
		out, _, err := f.m.RunOnMachine(providers.ReadOnly(wctx), replica.Name, listening)
		if err != nil {
			return false, nil // a dropped connection: ask again
		}
		return len(out) > 0 && out[0] == '0', nil
	}); err != nil {
		return nil, "", err
	}
	got, err := f.read(ctx, replica.Name, RecoverDir+"/etcd.yaml")
	if err != nil {
		return nil, "", err
	}
	if dataDir, err = etcdDataDir(got[0]); err != nil {
		return nil, "", fmt.Errorf("master %s: %w", replica.Name, err)
	}
	return got[0], dataDir, nil
}

// waitAlone waits until replica's etcd serves as a one-member cluster it
// leads.
func (f *Flavor) waitAlone(ctx context.Context, replica providers.Replica) error {
	rs, err := f.running(ctx, replica.Name)
	if err != nil {
		return err
	}
	var others []string
	for _, r := range rs {
		others = append(others, r.Name)
	}
	wctx, cancel := context.WithTimeout(ctx, RecoverTimeout)
	defer cancel()
	var last error
	err = wait.Until(wctx, 500*time.Millisecond, "etcd on "+replica.Name+" to serve alone", func() (bool, error) {
		// Each attempt bounded: a member list waits for a leader.
		actx, cancel := context.WithTimeout(wctx, 20*time.Second)
		defer cancel()
		t0 := time.Now()
		cli, err := f.EtcdCluster(actx, flavors.EtcdMain, others...)
		if err != nil {
			last = err
			f.log.Debug("kubeadm: etcd not reachable yet", "master", replica.Name, "took", time.Since(t0), "err", err)
			return false, nil
		}
		defer cli.Close()
		ms, err := cli.Members(actx)
		if err != nil {
			last = err
			f.log.Debug("kubeadm: etcd members not listed yet", "master", replica.Name, "took", time.Since(t0), "err", err)
			return false, nil
		}
		if len(ms) != 1 || !ms[0].Leader {
			last = fmt.Errorf("%d members", len(ms))
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// putEtcdBack puts the original etcd manifest (RecoverDir's: no
// --force-new-cluster) back in the kubelet's path, unless it is there.
func (f *Flavor) putEtcdBack(ctx context.Context, replica providers.Replica) error {
	back := fmt.Sprintf(`set -e
D=%[1]s
if [ -f "$D/etcd.yaml" ]; then cmp -s "$D/etcd.yaml" %[2]s || cp -p "$D/etcd.yaml" %[2]s; fi`, RecoverDir, EtcdManifest)
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, back); err != nil {
		return fmt.Errorf("master %s: put the etcd manifest back: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	return nil
}

// restartRecovered puts the original etcd manifest back, waits until the
// kubelet runs etcd from it and it is healthy, restarts the rest of the
// control plane when asked, drops RecoverDir, and waits until the
// endpoint admin.conf names answers through the master.
//
// After a restore the data is older than what the apiserver, the
// controller-manager and the scheduler cached: each is restarted, one at
// a time (restartScript), as the Kubernetes documentation asks
// ("Operating etcd clusters for Kubernetes", restoring: restart the
// components "to ensure that they don't rely on some stale data").
func (f *Flavor) restartRecovered(ctx context.Context, replica providers.Replica, controlPlane bool) error {
	if err := f.putEtcdBack(ctx, replica); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, RecoverTimeout)
	defer cancel()
	// Healthy, and no etcd left running with --force-new-cluster (the
	// bracket keeps pgrep from matching the shell that runs it).
	check := "if pgrep -f -- '--force-new-[c]luster' >/dev/null; then echo forced; fi; curl -s --max-time 3 " + EtcdHealthURL + " || true"
	if err := wait.Until(wctx, 500*time.Millisecond, "etcd on "+replica.Name+" to run from its own manifest again", func() (bool, error) {
		out, _, err := f.m.RunOnMachine(providers.ReadOnly(wctx), replica.Name, check)
		if err != nil {
			return false, nil
		}
		s := string(out)
		return !strings.HasPrefix(s, "forced") && strings.Contains(s, `"health":"true"`), nil
	}); err != nil {
		return err
	}
	if controlPlane {
		out, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "sh -c "+remote.ShellQuote(restartScript)+" restart "+strconv.Itoa(DefaultBindPort))
		if err != nil {
			return fmt.Errorf("master %s: restart the control plane on the restored data: %w (stderr: %s)", replica.Name, err, tail(stderr))
		}
		f.log.Info("kubeadm: control plane restarted on the restored data", "master", replica.Name, "log", strings.TrimSpace(string(out)))
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, "rm -rf "+RecoverDir); err != nil {
		return fmt.Errorf("master %s: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	// The endpoint admin.conf names answers again before the recovery's
	// next steps read through it.
	return f.waitEndpoint(ctx, replica.Name, RecoverTimeout)
}

// waitEndpoint waits, within timeout, until the endpoint admin.conf names
// answers through master m. On metal that is the VIP, which follows the
// apiserver's /readyz and so left a sole master while its etcd or its
// apiserver restarted: keepalived takes it back a few seconds after
// /readyz is 200 again, later on a busy host, and a kubectl through
// admin.conf before that fails with "no route to host".
func (f *Flavor) waitEndpoint(ctx context.Context, m string, timeout time.Duration) error {
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	if err := wait.Until(ectx, 500*time.Millisecond, "the cluster's endpoint (admin.conf's server) answering through "+m, func() (bool, error) {
		_, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ectx), m, adminKubectl+"get --raw /readyz")
		last = tail(stderr)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("master %s: %w (last: %s)", m, err, last)
	}
	return nil
}

// etcdDataDir is the etcd manifest's --data-dir.
func etcdDataDir(manifest []byte) (string, error) {
	d := ManifestFlag(manifest, "data-dir")
	if !strings.HasPrefix(d, "/") || d == "/" {
		return "", fmt.Errorf("the etcd manifest names no absolute --data-dir (%q)", d)
	}
	return filepath.Clean(d), nil
}

// WithManifestFlag adds flag to a static pod manifest's command, on a
// line of its own after --data-dir's (kubeadm writes one flag a line:
// GetEtcdPodSpec). Present already: unchanged.
func WithManifestFlag(manifest []byte, flag string) ([]byte, error) {
	lines := strings.SplitAfter(string(manifest), "\n")
	for _, l := range lines {
		if strings.TrimSpace(l) == "- "+flag {
			return manifest, nil
		}
	}
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		if strings.HasPrefix(t, "- --data-dir=") {
			indent := l[:len(l)-len(t)]
			out := append(append(append([]string{}, lines[:i+1]...), indent+"- "+flag+"\n"), lines[i+1:]...)
			return []byte(strings.Join(out, "")), nil
		}
	}
	return nil, errors.New("the etcd manifest's command has no --data-dir line to add " + flag + " after")
}

// EnvNodeBinary names hamaster-node's path (the CLI's --node-binary reads
// it too); unset, hamaster-node is looked for next to hamaster, then on
// $PATH.
const EnvNodeBinary = "HAMASTER_NODE_BINARY"

// SetNodeBinary sets hamaster-node's path, "" to look for it.
func (f *Flavor) SetNodeBinary(path string) { f.nodeBinary = path }

// upload writes data to path on machine: by the provider's own upload
// when it has one, otherwise in pieces RunOnMachine can carry, renamed
// into place once whole.
func (f *Flavor) upload(ctx context.Context, machine, path string, data []byte) error {
	if f.upl != nil {
		// The provider writes files on its machines itself (metal, over
		// SSH's stdin).
		return f.upl.UploadToMachine(ctx, machine, path, data, 0o600)
	}
	part := remote.ShellQuote(path + ".part")
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, "mkdir -p "+remote.ShellQuote(filepath.Dir(path))+" && : > "+part); err != nil {
		return fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
	}
	for off := 0; off < len(data); off += uploadChunk {
		end := min(off+uploadChunk, len(data))
		cmd := "printf %s " + base64.StdEncoding.EncodeToString(data[off:end]) + " | base64 -d >> " + part
		if _, stderr, err := f.m.RunOnMachine(ctx, machine, cmd); err != nil {
			return fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
		}
	}
	cmd := fmt.Sprintf("[ $(stat -c %%s %s) = %d ] && mv -f %s %s", part, len(data), part, remote.ShellQuote(path))
	if _, stderr, err := f.m.RunOnMachine(ctx, machine, cmd); err != nil {
		return fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
	}
	return nil
}

// tarGz packs dir's tree (paths relative to it).
func tarGz(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = io.Copy(tw, fh)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
