package providers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
)

// PKIDir is where the operator keeps a cluster's CA and issued
// certificates: <state-dir>/<cluster>/pki.
func PKIDir(stateDir, cluster string) string { return filepath.Join(stateDir, cluster, "pki") }

// OperatorEtcd connects to etcd with mTLS through the client URLs of the
// running replicas not named in exclude: the cluster CA and the operator's
// etcd client certificate from PKIDir, the certificate issued from the CA
// on first use. It is the Etcd method of providers whose operator reaches
// the replicas' etcd directly.
func OperatorEtcd(ctx context.Context, stateDir, cluster string, replicas []Replica, exclude []string, log *slog.Logger) (*etcdmember.Client, error) {
	skip := map[string]bool{}
	for _, e := range exclude {
		skip[e] = true
	}
	var eps []string
	for _, r := range replicas {
		if r.Running() && !skip[r.Name] && r.Address != "" {
			eps = append(eps, ClientURL(r.Address))
		}
	}
	if len(eps) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: no running replica to reach etcd through (excluding %v)", cluster, exclude)
	}
	crt, key, err := OperatorClientCert(stateDir, cluster)
	if err != nil {
		return nil, err
	}
	pki := PKIDir(stateDir, cluster)
	return etcdmember.New(ctx, etcdmember.Config{Endpoints: eps, CACert: filepath.Join(pki, "ca.crt"), Cert: crt, Key: key, Logger: log})
}

// OperatorClientCert returns the paths of the operator's etcd client
// certificate and key in PKIDir, issuing them from the cluster CA when
// missing.
func OperatorClientCert(stateDir, cluster string) (crt, key string, err error) {
	pki := PKIDir(stateDir, cluster)
	crt, key = filepath.Join(pki, "etcd-client.crt"), filepath.Join(pki, "etcd-client.key")
	if _, err := os.Stat(crt); err == nil {
		return crt, key, nil
	}
	ca, err := certs.LoadCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"))
	if err != nil {
		return "", "", errkind.Errorf(errkind.FailedPrecondition, "cluster %s: load the cluster CA from %s (copy the masters' CA there): %w", cluster, pki, err)
	}
	pair, err := ca.IssueClient("hamaster", nil, certs.ECDSA)
	if err != nil {
		return "", "", fmt.Errorf("issue the operator's etcd client certificate: %w", err)
	}
	if err := pair.Write(crt, key); err != nil {
		return "", "", err
	}
	return crt, key, nil
}
