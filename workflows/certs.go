package workflows

import (
	"context"
	"fmt"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
)

// CertRenewWindow is how close to expiry a certificate is marked by status
// and renewed by rotate-certs by default.
const CertRenewWindow = 30 * 24 * time.Hour

// clusterSANs is what every replica's apiserver certificate must cover
// besides the replica itself: the static IP / LB, every DNS name of the
// endpoint (the recorded one and extra), the service IP and kubernetes.*.
func clusterSANs(ctx context.Context, d *Deps, extraDNS string) (certs.APIServerSANs, error) {
	ip, _, err := d.Provider.StaticIP().Get(ctx)
	if err != nil {
		return certs.APIServerSANs{}, err
	}
	s := certs.APIServerSANs{StaticIP: ip, ServiceCIDR: certs.DefaultServiceCIDR}
	ep, err := LoadEndpoint(d.StateDir, d.Cluster)
	if err != nil {
		return s, err
	}
	for _, n := range []string{ep.DNSName, extraDNS} {
		if n != "" && (len(s.DNSNames) == 0 || s.DNSNames[0] != n) {
			s.DNSNames = append(s.DNSNames, n)
		}
	}
	return s, nil
}

// certProblem says why a replica's apiserver certificate must be renewed
// (missing SANs of want plus the replica itself, or expiring within
// `within`), or "" when it need not.
func certProblem(rep providers.Replica, want certs.APIServerSANs, within time.Duration, now time.Time) string {
	file := rep.Template.Files[providers.FileAPIServerCert]
	if len(file) == 0 {
		return "no apiserver certificate"
	}
	cert, err := certs.ParseCertPEM(file)
	if err != nil {
		return fmt.Sprintf("unreadable apiserver certificate: %v", err)
	}
	want.ReplicaIPs = append(append([]string(nil), want.ReplicaIPs...), rep.Address)
	want.ReplicaNames = append(append([]string(nil), want.ReplicaNames...), rep.Name)
	dns, ips, err := want.SANs()
	if err != nil {
		return err.Error()
	}
	_, reason := certs.NeedsRenewal(cert, dns, ips, within, now)
	return reason
}
