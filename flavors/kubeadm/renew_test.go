package kubeadm

import (
	"slices"
	"testing"
	"time"
)

func TestExpiring(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	certs := []CertificateInfo{
		{Name: "apiserver", ExpirationDate: now.Add(10 * day)},
		{Name: "admin.conf", ExpirationDate: now.Add(300 * day)},
		{Name: "etcd-server", ExpirationDate: now.Add(-day)}, // expired
		{Name: "front-proxy-client", ExpirationDate: now.Add(5 * day), ExternallyManaged: true},
		{Name: "super-admin.conf", ExpirationDate: now.Add(5 * day), Missing: true},
		{Name: "ca", ExpirationDate: now.Add(5 * day), Authority: true},
	}
	cases := []struct {
		within time.Duration
		want   []string
	}{
		{0, []string{"etcd-server"}},
		{30 * day, []string{"apiserver", "etcd-server"}},
		{365 * day, []string{"apiserver", "admin.conf", "etcd-server"}},
	}
	for _, c := range cases {
		if got := expiring(certs, now, c.within); !slices.Equal(got, c.want) {
			t.Errorf("expiring(within %v) = %v; want %v (never an external CA's, a missing one or a CA)", c.within, got, c.want)
		}
	}
}
