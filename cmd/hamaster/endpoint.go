package main

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// endpointCommand is 'hamaster endpoint': the cluster's endpoint, for
// flavors whose masters record it (kubeadm's controlPlaneEndpoint).
func endpointCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "endpoint",
		Usage: "move the endpoint kubeadm's masters record (controlPlaneEndpoint) to another address or name",
		Subcommands: []*cli.Command{{
			Name:      "set",
			Usage:     "make ADDRESS[:PORT] or NAME[:PORT] the cluster's endpoint on every master, clients on the old one served throughout",
			ArgsUsage: "ADDRESS|NAME[:PORT]",
			Description: `What kubeadm leaves to its users (kubernetes/kubeadm#1955,
kubernetes/kubernetes#95564): a cluster built without
--control-plane-endpoint, or with one that must change, cannot move it
without re-signing certificates. hamaster does it, one master at a time:

  1. every master's apiserver serving certificate is reissued from the
     masters' own CA with every name it had plus the new one (the
     apiserver reloads it without a restart: clients of the old address
     keep working);
  2. kubeadm-config's controlPlaneEndpoint (and apiServer.certSANs, so a
     later 'kubeadm upgrade' or 'certs renew' keeps the name) and
     kube-public/cluster-info's server are set: later joins read them;
  3. kube-proxy's kubeconfig (its ConfigMap) names the new endpoint and
     its DaemonSet is rolled once, so that its pods read it; each worker
     the provider knows (metal: the inventory's role: worker hosts) whose
     kubelet.conf names a master's own address or an endpoint the
     cluster had before (kubeadm-config's hamaster.io/former-endpoints
     annotation, where step 2 records the one it replaces) is moved to
     the new endpoint, one worker at a time, its kubelet restarted and
     its Node heartbeating again before the next;
  4. each master's admin.conf, super-admin.conf and kubelet.conf point at
     the new endpoint and its kubelet restarts (its pods keep running).

Run with the endpoint the masters record already, it moves what is still
left on one master's own address ('hamaster status' lists it under
PINNED TO ONE MASTER): every step is idempotent.

The first add-replica of a cluster with no endpoint does this itself, to
the VIP or load balancer. PORT defaults to the load balancer's (metal:
HAProxy's 8443). The new address must reach the apiservers before you
run this: hamaster checks that it accepts connections before anything
changes. Masters of other flavors record no endpoint (their clients use
the static IP or load balancer hamaster keeps): the command refuses.

A kubeadm cluster on your hosts, its endpoint moved to a DNS name that
resolves to the VIP:
  'hamaster --provider metal --cluster prod endpoint set --yes api.prod.example.com'

Example:
  hamaster --cluster demo endpoint set --yes 127.0.0.9   # hamaster's own masters record none: exit 3`,
			Flags: providerFlags(true),
			Action: func(c *cli.Context) error {
				if err := g.mutating(c, e); err != nil {
					return err
				}
				if c.NArg() != 1 {
					return usageErr("endpoint set: one argument: ADDRESS|NAME[:PORT] (got %d)", c.NArg())
				}
				p, err := g.openCheckedProvider(c)
				if err != nil {
					return err
				}
				defer p.Close()
				ep, err := parseEndpoint(c.Args().First(), providers.EndpointPortOf(p))
				if err != nil {
					return err
				}
				d := g.deps(c, e, p)
				if d.FlavorCaps().EndpointMover == nil {
					return errkind.Errorf(errkind.FailedPrecondition, "endpoint set: the %s flavor's masters record no endpoint: their clients use the static IP or load balancer hamaster keeps", d.Flavor().Name())
				}
				wf := workflows.EndpointSet(d, workflows.EndpointParams{Endpoint: ep})
				return workflows.Execute(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e), ShowPlan: g.showPlan(e)})
			},
		}},
	}
}

// parseEndpoint checks an endpoint argument: an IP address or DNS name,
// with an optional port (default port); the result is host:port.
func parseEndpoint(s string, port int) (string, error) {
	host, ps := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, ps = h, p
	}
	if ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", usageErr("endpoint %q: port %q must be 1-65535", s, ps)
		}
		port = n
	}
	if _, err := netip.ParseAddr(host); err != nil {
		if err := validDNSName("endpoint", host); err != nil {
			return "", usageErr("endpoint %q: %q is neither an IP address nor a DNS name", s, host)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}
