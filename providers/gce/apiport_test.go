package gce_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
)

// The apiserver port is the flavor's (set when it is bound); the
// operator's --gce-apiserver-port wins over it; a bad one is refused
// before any client exists.
func TestAPIServerPortOption(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, port string) (*gce.Provider, error) {
		t.Helper()
		o := map[string]string{gce.OptProject: "p", gce.OptZones: "us-central1-b", remote.OptUser: "u", gce.OptEndpoint: "http://127.0.0.1:1"}
		if port != "" {
			o[gce.OptAPIServerPort] = port
		}
		p, err := gce.New(context.Background(), providers.Settings{Cluster: "c", Options: o})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = p.Close() })
		return p.(*gce.Provider), nil
	}
	for _, tc := range []struct {
		name, opt    string
		flavor, want int
	}{
		{name: "unbound: hamaster's default", want: providers.APIServerPort},
		{name: "the flavor's", flavor: 443, want: 443},
		{name: "the operator's over the flavor's", opt: "8443", flavor: 443, want: 8443},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := open(t, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.flavor != 0 {
				p.SetAPIServerPort(tc.flavor)
			}
			if got := providers.APIServerPortOf(p); got != tc.want {
				t.Errorf("port %d, want %d", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"0", "65536", "https"} {
		if _, err := open(t, bad); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--"+gce.OptAPIServerPort) {
			t.Errorf("--%s %q: %v; want InvalidArgument naming the flag", gce.OptAPIServerPort, bad, err)
		}
	}
}
