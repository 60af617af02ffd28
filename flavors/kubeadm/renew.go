package kubeadm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// Renewing a master's certificates as kubeadm's "Certificate Management
// with kubeadm" page has the operator do it by hand (manual certificate
// renewal; cmd/kubeadm/app/cmd/certs.go newCmdCertsRenewal):
// `kubeadm certs renew all`, which reissues every certificate and
// kubeconfig kubeadm manages from the CAs on the master (the CAs
// themselves are not renewed), then the control plane's static pods
// restarted, "since dynamic certificate reload is currently not
// supported for all components and certificates": each manifest moved
// out of /etc/kubernetes/manifests until the kubelet has stopped its
// pod, then back. etcd is the exception: it reads its certificate files
// again on every TLS handshake (etcd#7829, v3.2.0: "reload TLS
// certificates for every client requests"; for clients dialling an IP,
// as kubeadm's do, since the fix of etcd#9541 in v3.3.4), so it keeps
// running (a restart would cost two masters their quorum for
// its duration). What the page leaves to the operator, hamaster does:
// the master drained first (rotate-certs), a backup that RollbackMaster
// restores (the upgrade's, UpgradeBackupDir), each component waited for
// (stopped, then healthy on its own loopback port) before the next, and
// a manifest a crashed run left out put back by the next.

var _ flavors.CertRenewer = (*Flavor)(nil)

// RestartDir holds a manifest moved out for its pod's restart.
const RestartDir = "/var/lib/hamaster/restart-manifests"

// RenewTimeout bounds RenewCerts on one master.
const RenewTimeout = 8 * time.Minute

// restartScript restarts the control plane's static pods but etcd's,
// one at a time, by moving each manifest out of the kubelet's directory
// until nothing listens on its health port any more and back until it
// answers healthy there (the ports and paths of kubeadm's liveness
// probes: GetStaticPodSpecs). $1 is the apiserver's port.
const restartScript = `set -e
M=` + ManifestsDir + `
R=` + RestartDir + `
mkdir -p "$R"
for f in "$R"/*.yaml; do [ -e "$f" ] || continue; mv -f "$f" "$M/"; echo "put back $(basename "$f"), left out by an interrupted run"; done
probe() {
  case $1 in
  kube-apiserver) curl -sk -o /dev/null -w '%{http_code}' --max-time 2 "https://127.0.0.1:$2/livez" ;;
  kube-controller-manager) curl -sk -o /dev/null -w '%{http_code}' --max-time 2 https://127.0.0.1:10257/healthz ;;
  kube-scheduler) curl -sk -o /dev/null -w '%{http_code}' --max-time 2 https://127.0.0.1:10259/healthz ;;
  esac
}
await() {
  i=0
  while :; do
    c=$(probe "$1" "$PORT" || true)
    if [ "$2" = down ] && [ "$c" = 000 ]; then return 0; fi
    if [ "$2" = up ] && [ "$c" = 200 ]; then return 0; fi
    i=$((i + 1))
    if [ $i -ge $(($3 * 4)) ]; then echo "$1: not $2 after $3 s (last HTTP status $c)" >&2; return 1; fi
    sleep 0.25
  done
}
PORT=$1
for n in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -e "$M/$n.yaml" ] || continue
  s=$(date +%s)
  mv "$M/$n.yaml" "$R/$n.yaml"
  if ! await "$n" down 90; then mv -f "$R/$n.yaml" "$M/"; exit 1; fi
  mv "$R/$n.yaml" "$M/$n.yaml"
  await "$n" up 180
  echo "$n restarted in $(($(date +%s) - s)) s"
done
`

// ExpiringCerts implements flavors.CertRenewer: the certificates
// `kubeadm certs check-expiration` lists on replica that kubeadm renews
// (not a CA, not an external CA's, present) and that expire within
// `within`.
func (f *Flavor) ExpiringCerts(ctx context.Context, replica providers.Replica, within time.Duration) ([]string, error) {
	certs, err := f.CheckExpiration(ctx, replica.Name)
	if err != nil {
		return nil, err
	}
	return expiring(certs, time.Now(), within), nil
}

// expiring names the certificates of certs kubeadm renews that expire
// within `within` of now.
func expiring(certs []CertificateInfo, now time.Time, within time.Duration) []string {
	var out []string
	for _, c := range certs {
		if c.Missing || c.ExternallyManaged || c.Authority {
			continue
		}
		if c.ExpirationDate.Sub(now) < within {
			out = append(out, c.Name)
		}
	}
	return out
}

// RenewCerts implements flavors.CertRenewer: on replica, the upgrade's
// backup (at the version it runs), `kubeadm certs renew all`, the static
// pods restarted one at a time (restartScript), and the apiserver
// waited for, ready at its version.
func (f *Flavor) RenewCerts(ctx context.Context, replica providers.Replica) error {
	ctx, cancel := context.WithTimeout(ctx, RenewTimeout)
	defer cancel()
	m := replica.Name
	man, err := f.read(ctx, m, APIServerManifest)
	if err != nil {
		return err
	}
	v, err := ManifestVersion(man[0])
	if err != nil {
		return fmt.Errorf("master %s: %s: %w", m, APIServerManifest, err)
	}
	if err := f.backup(ctx, m, v, false, false); err != nil {
		return err
	}
	f.log.Info("kubeadm certs renew all", "master", m)
	if _, stderr, err := f.m.RunOnMachine(ctx, m, "kubeadm certs renew all"); err != nil {
		return fmt.Errorf("kubeadm certs renew all on %s: %w (stderr: %s)", m, err, tail(stderr))
	}
	out, stderr, err := f.m.RunOnMachine(ctx, m, "sh -c "+remote.ShellQuote(restartScript)+" restart "+strconv.Itoa(DefaultBindPort))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" {
			f.log.Info(line, "master", m)
		}
	}
	if err != nil {
		return fmt.Errorf("restart the control plane of %s on its renewed certificates: %w (stderr: %s)", m, err, tail(stderr))
	}
	return f.waitAPIServer(ctx, m, v)
}
