package gce_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// TestEtcdThroughSSHChecksHostKeys reaches kube-up master 0's two etcd
// clusters (127.0.0.1:2379 with mTLS, 127.0.0.1:4002) over SSH to its
// external address with the fake's known_hosts, and refuses, before any
// etcd call, a known_hosts that holds another key for that address.
func TestEtcdThroughSSHChecksHostKeys(t *testing.T) {
	t.Parallel()
	c := gcetest.Up(t, "sshetcd", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	for _, cl := range []string{providers.EtcdMain, providers.EtcdEvents} {
		cli, err := c.Flavor(t).EtcdCluster(ctx, cl)
		if err != nil {
			t.Fatalf("etcd %s through ssh: %v", cl, err)
		}
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil || len(ms) != 1 || ms[0].Name != kubeenv.MemberName(c.Master) || !ms[0].Healthy {
			t.Fatalf("etcd %s members through the tunnel = %+v, %v", cl, ms, err)
		}
	}

	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(bad, []byte(knownhosts.Line([]string{c.StaticIP}, other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.Settings
	s.Options = map[string]string{}
	for k, v := range c.Settings.Options {
		s.Options[k] = v
	}
	s.Options[remote.OptKnownHosts] = bad
	p, err := gce.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := kubeup.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)
	_, err = f.EtcdCluster(ctx, providers.EtcdMain)
	if err == nil || !strings.Contains(err.Error(), "host key") {
		t.Fatalf("wrong known_hosts: %v; want a host key refusal", err)
	}
	if !errors.Is(err, errkind.Unavailable) && !errors.Is(err, errkind.FailedPrecondition) {
		t.Fatalf("wrong known_hosts: error kind of %v", err)
	}
}
