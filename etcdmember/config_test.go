package etcdmember_test

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
)

func TestConfigValidation(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-ca.crt")
	for _, tc := range []struct {
		name string
		cfg  etcdmember.Config
		want string // must appear in the message
	}{
		{"no endpoints", etcdmember.Config{}, "at least one endpoint"},
		{"no scheme", etcdmember.Config{Endpoints: []string{"127.0.0.1:2379"}}, `"127.0.0.1:2379"`},
		{"bad scheme", etcdmember.Config{Endpoints: []string{"ftp://127.0.0.1:2379"}}, `"ftp://127.0.0.1:2379"`},
		{"no port", etcdmember.Config{Endpoints: []string{"https://10.0.0.1"}}, `"https://10.0.0.1"`},
		{"bad port", etcdmember.Config{Endpoints: []string{"http://127.0.0.1:2379", "http://10.0.0.2:99999"}}, `"http://10.0.0.2:99999"`},
		{"path", etcdmember.Config{Endpoints: []string{"http://127.0.0.1:2379/v3"}}, `"http://127.0.0.1:2379/v3"`},
		{"empty endpoint", etcdmember.Config{Endpoints: []string{""}}, `""`},
		{"missing CA", etcdmember.Config{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: missing}, missing},
		{"missing cert", etcdmember.Config{Endpoints: []string{"https://127.0.0.1:2379"}, Cert: filepath.Join(dir, "c.crt"), Key: filepath.Join(dir, "c.key")}, filepath.Join(dir, "c.crt")},
		{"cert without key", etcdmember.Config{Endpoints: []string{"https://127.0.0.1:2379"}, Cert: filepath.Join(dir, "c.crt")}, "must be given together"},
		{"TLS and files", etcdmember.Config{Endpoints: []string{"https://127.0.0.1:2379"}, TLS: &tls.Config{}, CACert: missing}, "not both"},
		{"negative timeout", etcdmember.Config{Endpoints: []string{"http://127.0.0.1:2379"}, StatusTimeout: -1}, "negative status timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := etcdmember.New(t.Context(), tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Errorf("error %v is not InvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}
