//go:build fidelity

// Run by .ci/run's cloud-slow tier after 'make test' (~70 s: a bastion
// and a master booted on the namespace VPC, two SSH paths); the GCE
// package's TestEtcdThroughSSHChecksHostKeys covers the provider-side
// SSH tunnel in make test.

package aws_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors/registry"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
)

// TestEtcdThroughSSH reaches master 0's etcd and apiserver from the
// operator's namespace both ways the provider offers, on the namespace
// VPC where nothing else is routed: an SSH tunnel to the master's public
// address (its Elastic IP), and a jump through the bastion to its private
// address. Each path gets a known_hosts naming only the hosts it must
// use, so success proves which path was taken. A known_hosts with other
// keys is refused before any etcd call.
func TestEtcdThroughSSH(t *testing.T) {
	t.Parallel()
	// The DNS endpoint: master 0 keeps its Elastic IP once there is an
	// NLB, so every master has a public address.
	c := awstest.UpKubeUp(t, "sshetcd", awstest.KubeUpOptions{NoProvider: true, EndpointMode: "dns"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	k := c.KubeUp
	all, err := os.ReadFile(k.KnownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	// only is a known_hosts with the plane's lines for hosts.
	only := func(hosts ...string) string {
		var lines []string
		for _, l := range strings.Split(string(all), "\n") {
			h, _, _ := strings.Cut(l, " ")
			for _, want := range hosts {
				if h == knownhosts.Normalize(want) {
					lines = append(lines, l)
				}
			}
		}
		if len(lines) != len(hosts) {
			t.Fatalf("known_hosts has %d of the lines for %v:\n%s", len(lines), hosts, all)
		}
		f := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	bastionHost, _, _ := strings.Cut(k.Bastion, ":")
	open := func(knownHosts, bastion string) (*awsp.KubeUpProvider, error) {
		s := c.Settings
		s.Options = map[string]string{}
		for key, v := range c.Settings.Options {
			s.Options[key] = v
		}
		s.Options[remote.OptKnownHosts] = knownHosts
		s.Options[awsp.OptSSHBastion] = bastion
		p, err := awsp.New(ctx, s)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = p.(interface{ Close() error }).Close() })
		if _, err := registry.Open("", p, nil); err != nil { // kube-up's master format
			return nil, err
		}
		return p.(*awsp.KubeUpProvider), nil
	}
	for _, tc := range []struct {
		name, bastion string
		known         []string
	}{
		{"public address", "", []string{k.Master.EIP}},
		{"bastion", k.Bastion, []string{bastionHost, k.Master.InternalIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := open(only(tc.known...), tc.bastion)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := kubeUpFlavor(t, p).EtcdCluster(ctx, "main")
			if err != nil {
				t.Fatalf("etcd through ssh: %v", err)
			}
			ms, err := cli.Members(ctx)
			cli.Close()
			if err != nil || len(ms) != 1 || ms[0].Name != "etcd-"+k.Master.Hostname || !ms[0].Healthy {
				t.Fatalf("members through the tunnel = %+v, %v", ms, err)
			}
			// The workflows' apiserver probes go through SSH too.
			master, err := p.Instances().Get(ctx, c.Master)
			if err != nil {
				t.Fatal(err)
			}
			f, err := registry.Open("", p, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := &workflows.Deps{Provider: p, Master: f, Cluster: c.Name, StateDir: c.Settings.StateDir}
			if _, err := d.Probe(ctx, p.APIServerURL(master), "/readyz"); err != nil {
				t.Fatalf("probe the apiserver %s through ssh: %v", p.APIServerURL(master), err)
			}
		})
	}

	// A second master, cloned with a public address of its own as kube-up
	// launched master 0 (--associate-public-ip-address): without a
	// bastion, each member is reached through its own master's public
	// address.
	pb, err := open(k.KnownHostsFile, k.Bastion)
	if err != nil {
		t.Fatal(err)
	}
	c.Provider = pb
	e := envOn(t, c, true)
	const second = "sshetcd-master-b01"
	if err := e.addIn(ctx, second, awstest.ZoneB, nil); err != nil {
		t.Fatalf("add %s: %v", second, err)
	}
	pp, err := open(k.KnownHostsFile, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := pp.Instances().Get(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if pub := r.Template.Machine[awsp.MachinePublicIP]; pub != "true" {
		t.Errorf("%s: %s=%q, want a public address like master 0's", second, awsp.MachinePublicIP, pub)
	}
	for _, cl := range kubeUpFlavor(t, pp).EtcdClusters() {
		cli, err := kubeUpFlavor(t, pp).EtcdCluster(ctx, cl, c.Master) // through the new master
		if err != nil {
			t.Fatalf("etcd %s through %s's public address: %v", cl, second, err)
		}
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil || len(ms) != 2 {
			t.Fatalf("etcd %s members %+v, %v", cl, ms, err)
		}
		for _, m := range ms {
			if !m.Healthy || m.Learner {
				t.Errorf("etcd %s member %s reached through its public address: healthy %v learner %v (%s)", cl, m.Name, m.Healthy, m.Learner, m.Err)
			}
		}
	}

	// A known_hosts that does not know the hosts: refused before any
	// etcd call, on both paths.
	_, otherKey := sshtest.NewKey(t, t.TempDir(), "other")
	var wrong []string
	for _, a := range []string{k.Master.EIP, k.Master.InternalIP, bastionHost} {
		wrong = append(wrong, knownhosts.Line([]string{knownhosts.Normalize(a)}, sshtest.PublicKey(t, otherKey)))
	}
	badKnown := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(badKnown, []byte(strings.Join(wrong, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bastion := range []string{"", k.Bastion} {
		p, err := open(badKnown, bastion)
		if err != nil {
			// Opening reads user data only: it must not need SSH.
			t.Fatal(err)
		}
		if _, err := kubeUpFlavor(t, p).EtcdCluster(ctx, "main"); err == nil || !strings.Contains(err.Error(), "host key") {
			t.Errorf("bastion %q, wrong known_hosts: %v; want a host key refusal", bastion, err)
		} else if !errors.Is(err, errkind.Unavailable) && !errors.Is(err, errkind.FailedPrecondition) {
			t.Errorf("bastion %q, wrong known_hosts: error kind of %v", bastion, err)
		}
	}
}
