package gce_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/gce/gcetest"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// TestEtcdThroughSSH reaches master 0's etcd the kube-up way: an SSH
// tunnel to the master's external address (a real OpenSSH server
// listening there and only there: the internal address is never dialed)
// and etcd's client URL as the master sees it. sshd only permits the
// tunnel to that URL, and a wrong known_hosts refuses the connection.
func TestEtcdThroughSSH(t *testing.T) {
	t.Parallel()
	c := gcetest.Up(t, "sshetcd", gcetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master, err := c.Provider.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	ext := c.StaticIP // master 0's external address while it holds the static IP
	ln, err := net.Listen("tcp", net.JoinHostPort(ext, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	etcdAddr := net.JoinHostPort(master.Address, fmt.Sprint(providers.EtcdClientPort))
	srv := sshtest.Start(t, sshtest.Options{Config: []string{
		"ListenAddress " + net.JoinHostPort(ext, port),
		"PermitOpen " + etcdAddr,
		"LogLevel DEBUG1",
	}})
	// sshtest.Start returns once sshd listens on its own address; wait for
	// the master's too.
	sshAddr := net.JoinHostPort(ext, port)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.Dial("tcp", sshAddr)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sshd never listened on %s: %v", sshAddr, err)
		case <-tick.C:
		}
	}
	open := func(knownHosts string) (*gce.Provider, error) {
		s := c.Settings
		s.Options = map[string]string{}
		for k, v := range c.Settings.Options {
			s.Options[k] = v
		}
		s.Options[gce.OptSSHUser] = srv.User
		s.Options[gce.OptSSHKey] = srv.ClientKeyFile
		s.Options[gce.OptSSHKnownHosts] = knownHosts
		s.Options[gce.OptSSHPort] = port
		s.Options[gce.OptSSHEtcdEndpoint] = "https://" + etcdAddr
		p, err := gce.New(ctx, s)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { p.Close() })
		return p.(*gce.Provider), nil
	}

	p, err := open(srv.KnownHosts(t, sshAddr, srv.HostKeys))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := p.Etcd(ctx)
	if err != nil {
		t.Fatalf("etcd through ssh: %v", err)
	}
	ms, err := cli.Members(ctx)
	cli.Close()
	if err != nil || len(ms) != 1 || ms[0].Name != c.Master || !ms[0].Healthy {
		t.Fatalf("members through the tunnel = %+v, %v", ms, err)
	}
	if !strings.Contains(srv.Log(), fmt.Sprintf("direct_tcpip: originator 0.0.0.0 port 0, target %s port %d", master.Address, providers.EtcdClientPort)) {
		t.Errorf("sshd's log shows no tunnel to %s:\n%s", etcdAddr, srv.Log())
	}

	// A host key that is not the server's: refused before any etcd call.
	_, otherKey := sshtest.NewKey(t, t.TempDir(), "other")
	bad, err := open(srv.KnownHosts(t, sshAddr, []ssh.PublicKey{sshtest.PublicKey(t, otherKey)}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Etcd(ctx); err == nil || !strings.Contains(err.Error(), "host key") {
		t.Fatalf("wrong known_hosts: %v; want a host key refusal", err)
	} else if !errors.Is(err, errkind.Unavailable) && !errors.Is(err, errkind.FailedPrecondition) {
		t.Fatalf("wrong known_hosts: error kind of %v", err)
	}
}
