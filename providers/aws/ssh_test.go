package aws_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/aws/awstest"
	"github.com/hamaster/hamaster/remote/sshtest"
	"github.com/hamaster/hamaster/workflows"
)

// TestEtcdThroughSSH reaches master 0's etcd from "outside the VPC" both
// ways the provider offers: an SSH tunnel to the master's public address
// (the Elastic IP), and a jump through a bastion to the master's private
// address. One real OpenSSH server plays the bastion (its own address),
// the master's public side and its private side (two more listen
// addresses); its log shows which connection each step opened, and
// PermitOpen lets the tunnels reach only the master's sshd and etcd.
// A known_hosts without the master's key refuses before any etcd call.
func TestEtcdThroughSSH(t *testing.T) {
	t.Parallel()
	c := awstest.Up(t, "sshetcd", awstest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master, err := c.Provider.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.StaticIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	public, private := net.JoinHostPort(c.StaticIP, port), net.JoinHostPort(master.Address, port)
	etcdAddr := net.JoinHostPort(master.Address, fmt.Sprint(providers.EtcdClientPort))
	apiAddr := net.JoinHostPort(master.Address, fmt.Sprint(providers.APIServerPort))
	srv := sshtest.Start(t, sshtest.Options{Config: []string{
		"ListenAddress " + public,
		"ListenAddress " + private,
		"PermitOpen " + etcdAddr + " " + private + " " + apiAddr,
		"LogLevel DEBUG1",
	}})
	for _, a := range []string{public, private} {
		waitListening(ctx, t, a)
	}
	var lines []string
	for _, a := range []string{srv.Addr, public, private} {
		for _, k := range srv.HostKeys {
			lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(a)}, k))
		}
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(knownHosts, bastion string) (*awsp.Provider, error) {
		s := c.Settings
		s.Options = map[string]string{}
		for k, v := range c.Settings.Options {
			s.Options[k] = v
		}
		s.Options[awsp.OptSSHUser] = srv.User
		s.Options[awsp.OptSSHKey] = srv.ClientKeyFile
		s.Options[awsp.OptSSHKnownHosts] = knownHosts
		s.Options[awsp.OptSSHPort] = port
		s.Options[awsp.OptSSHBastion] = bastion
		// The fake master's etcd listens on its private address; a kube-up
		// master's on 127.0.0.1 (the default).
		s.Options[awsp.OptSSHEtcdEndpoint] = "https://" + etcdAddr
		p, err := awsp.New(ctx, s)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { p.Close() })
		return p.(*awsp.Provider), nil
	}
	tunnel := fmt.Sprintf("direct_tcpip: originator 0.0.0.0 port 0, target %s port %d", master.Address, providers.EtcdClientPort)
	jump := fmt.Sprintf("direct_tcpip: originator 0.0.0.0 port 0, target %s port %s", master.Address, port)
	for _, tc := range []struct {
		name, bastion string
		jumped        bool
	}{
		{"public address", "", false},
		{"bastion", srv.Addr, true},
	} {
		// Not parallel: the cases read the same sshd's log.
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.Log())
			p, err := open(known, tc.bastion)
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
			log := srv.Log()[before:]
			if !strings.Contains(log, tunnel) {
				t.Errorf("sshd's log shows no tunnel to %s:\n%s", etcdAddr, log)
			}
			if got := strings.Contains(log, jump); got != tc.jumped {
				t.Errorf("jump through the bastion to %s: %v, want %v:\n%s", private, got, tc.jumped, log)
			}
			// The workflows' apiserver probes go through the tunnel too.
			d := &workflows.Deps{Provider: p, Cluster: c.Name, StateDir: c.Settings.StateDir}
			before = len(srv.Log())
			if _, err := d.Probe(ctx, p.APIServerURL(master), "/readyz"); err != nil {
				t.Fatalf("probe the apiserver through ssh: %v", err)
			}
			if apiTunnel := fmt.Sprintf("direct_tcpip: originator 0.0.0.0 port 0, target %s port %d", master.Address, providers.APIServerPort); !strings.Contains(srv.Log()[before:], apiTunnel) {
				t.Errorf("sshd's log shows no tunnel to the apiserver %s:\n%s", apiAddr, srv.Log()[before:])
			}
		})
	}

	// A known_hosts that does not know the master: refused before any
	// etcd call, on both paths.
	_, otherKey := sshtest.NewKey(t, t.TempDir(), "other")
	var wrong []string
	for _, a := range []string{public, private} {
		wrong = append(wrong, knownhosts.Line([]string{knownhosts.Normalize(a)}, sshtest.PublicKey(t, otherKey)))
	}
	for _, k := range srv.HostKeys {
		wrong = append(wrong, knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, k))
	}
	badKnown := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(badKnown, []byte(strings.Join(wrong, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bastion := range []string{"", srv.Addr} {
		p, err := open(badKnown, bastion)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Etcd(ctx); err == nil || !strings.Contains(err.Error(), "host key") {
			t.Errorf("bastion %q, wrong known_hosts: %v; want a host key refusal", bastion, err)
		} else if !errors.Is(err, errkind.Unavailable) && !errors.Is(err, errkind.FailedPrecondition) {
			t.Errorf("bastion %q, wrong known_hosts: error kind of %v", bastion, err)
		}
	}
}

// waitListening polls until something accepts on addr.
func waitListening(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nothing listens on %s: %v", addr, err)
		case <-tick.C:
		}
	}
}
