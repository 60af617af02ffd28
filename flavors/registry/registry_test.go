package registry

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

// ownProvider reaches hamaster-format etcd and finds no other format.
type ownProvider struct{ providers.Provider }

func (ownProvider) Name() string { return "own" }
func (ownProvider) Etcd(context.Context, ...string) (*etcdmember.Client, error) {
	return nil, errors.New("unused")
}

// kubeUpProvider has a way into its machines and finds kube-up's masters.
type kubeUpProvider struct{ providers.Provider }

func (kubeUpProvider) Name() string                       { return "kube" }
func (kubeUpProvider) MasterFormat() string               { return flavors.KubeUp }
func (kubeUpProvider) MachineHostname(r, _ string) string { return r }
func (kubeUpProvider) DialMachine(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("unused")
}

func TestOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, flavor string
		p            providers.Provider
		want         string // the flavor opened, or a fragment of the error
		ok           bool
	}{
		{"detected: hamaster's own", "", ownProvider{}, flavors.Hamaster, true},
		{"detected: kube-up's", "", kubeUpProvider{}, flavors.KubeUp, true},
		{"named", flavors.Hamaster, ownProvider{}, flavors.Hamaster, true},
		{"unknown name", "kops", ownProvider{}, `--flavor "kops": want one of hamaster, kubeadm, kubeup`, false},
		{"kubeadm without a way to run it", flavors.Kubeadm, ownProvider{}, "no way to run kubeadm", false},
		{"kubeup without a way in", flavors.KubeUp, ownProvider{}, "no way into its machines", false},
		{"hamaster without its etcd", flavors.Hamaster, kubeUpProvider{}, "not in hamaster's format", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := Open(tc.flavor, tc.p, nil)
			if tc.ok {
				if err != nil || f.Name() != tc.want {
					t.Fatalf("Open(%q) = %v, %v; want %s", tc.flavor, f, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v; want an InvalidArgument error with %q", tc.flavor, err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, n := range append(Names(), "") {
		if err := Check(n); err != nil {
			t.Errorf("Check(%q) = %v", n, err)
		}
	}
	if err := Check("kube-up"); !errors.Is(err, errkind.InvalidArgument) || !strings.Contains(err.Error(), "--flavor") {
		t.Errorf("Check(kube-up) = %v; want an InvalidArgument error naming --flavor", err)
	}
}
