package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/flavors"
	hamasterflavor "github.com/hamaster/hamaster/flavors/hamaster"
	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers/local"
)

// localCommand is 'local': create or destroy a cluster on the embedded
// local provider.
func localCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:        "local",
		Usage:       "create or destroy a cluster on the embedded local provider (no cloud needed)",
		Subcommands: []*cli.Command{localUpCommand(e, g), localDownCommand(e, g)},
	}
}

// localUpDescription is the help text of 'local up'.
const localUpDescription = `Creates the cluster record, a CA, and master-0 (<cluster>-master) as a
hamaster-node process on 127.0.N.2 with the static IP 127.0.N.1 attached
(N derived from the cluster name, or --subnet). Idempotent: running it
again finishes an interrupted 'up'.

--addresses chooses, once for the cluster's life, where the replicas live:
  loopback   127.0.N.0/24: nothing to configure, no privilege needed
             (default with the stand-in)
  benchmark  198.19.N.0/24 (RFC 2544's range, never routed): 'local up'
             adds 198.19.N.1/24 to lo (needs root), 'local down' removes
             it (default with --control-plane real: kube-apiserver
             refuses loopback addresses in the kubernetes Endpoints, so
             'kubectl get endpoints kubernetes' lists replicas only here)

--control-plane chooses, once for the cluster's life, what serves each
replica's apiserver port:
  standin  hamaster-node's own stand-in (/readyz, /version, /kv), any v1.x
           version; the lighter of the two (docs/local.md has the figures)
  real     kube-apiserver at --version, from --kube-apiserver-dir
           (<dir>/<version>/kube-apiserver; 'make kube-apiserver' builds
           v1.33.13 and v1.34.4); a replica whose version has no binary
           there refuses to start its apiserver
For a real control plane: 'make kube-apiserver', then
'hamaster --cluster demo local up --control-plane real' (the newest built
version; --version v1.33.13 for the other)
and 'hamaster --cluster demo kubeconfig --file demo.kubeconfig' for kubectl.

Example:
  hamaster --cluster demo local up --version v1.30.2`

func localUpCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:        "up",
		Usage:       "create a single-master cluster: replicas are local processes running real etcd",
		Description: localUpDescription,
		Flags:       localUpFlags(),
		Action:      func(c *cli.Context) error { return localUp(c, e, g) },
	}
}

func localUpFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "version", Usage: "control-plane `VERSION` master-0 reports (runs, with --control-plane real; default: " + local.DefaultStandinVersion + " for the stand-in, " + nodeapi.NewestPinnedKubeVersion() + ", the newest 'make kube-apiserver' builds, for real)"},
		&cli.StringFlag{Name: "control-plane", EnvVars: []string{"HAMASTER_CONTROL_PLANE"}, Usage: "what serves the apiserver port: `standin|real` (see above; default: standin for a new cluster, the recorded choice for an existing one)"},
		&cli.StringFlag{Name: "kube-apiserver-dir", EnvVars: []string{"HAMASTER_KUBE_APISERVER_DIR"}, Usage: "--control-plane real: `DIR` of <version>/kube-apiserver (default $XDG_CACHE_HOME/hamaster/kube-apiserver, else ~/.cache/...)"},
		&cli.StringSliceFlag{Name: "extra-args", Usage: "control-plane flags (e.g. --v=2)"},
		&cli.StringFlag{Name: "subnet", Usage: "N of 127.0.N.0/24 or 198.19.N.0/24 (1-254; default derived from the cluster name)"},
		&cli.StringFlag{Name: "addresses", Usage: "where replicas live: `loopback|benchmark` (see above; default: benchmark with --control-plane real, else loopback)"},
		&cli.IntFlag{Name: "etcd-heartbeat-ms", Value: 100, Usage: "etcd heartbeat interval of the replicas"},
		&cli.IntFlag{Name: "etcd-election-ms", Value: 1000, Usage: "etcd election timeout of the replicas"},
		nodeBinaryFlag(),
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "overall timeout"},
		mutatingFlags()[1],
	}
}

// localUp is the action of 'local up': checks, then the cluster up and
// its master ready.
func localUp(c *cli.Context, e *env, g *globals) error {
	if err := checkLocalUp(c, e, g); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	o, err := localUpOptions(c)
	if err != nil {
		return err
	}
	if g.dryRun {
		return localUpPlan(e, g)
	}
	p, err := local.Up(ctx, g.settings(c), o, func(s string) { fmt.Fprintln(e.stderr, s) })
	if err != nil {
		return fmt.Errorf("local up %s: %w", g.cluster, err)
	}
	// Its masters are hamaster's own: the readiness probe trusts the CA
	// that flavor issues from.
	if g.master, err = flavorregistry.Open(flavors.Hamaster, p, g.logger); err != nil {
		return fmt.Errorf("local up %s: %w", g.cluster, err)
	}
	d := g.deps(c, e, p)
	ip := p.Info().StaticIP
	if err := waitReady(ctx, d, ip); err != nil {
		return err
	}
	cp := cmp.Or(p.Info().ControlPlane, "standin")
	return g.result(e, fmt.Sprintf("cluster %s is up: endpoint https://%s:6443 (etcd and apiserver on %s; control plane: %s)", g.cluster, ip, local.MasterName(g.cluster), cp),
		map[string]any{"cluster": g.cluster, "state": "up", "endpoint": fmt.Sprintf("https://%s:6443", ip), "replica": local.MasterName(g.cluster), "control_plane": cp})
}

// checkLocalUp is the prologue of 'local up' and its flags' checks.
func checkLocalUp(c *cli.Context, e *env, g *globals) error {
	if err := g.mutating(c, e); err != nil {
		return err
	}
	if g.provider != local.Name {
		return usageErr("--provider: 'local up' needs --provider local, not %q", g.provider)
	}
	if c.IsSet("version") {
		if _, err := parseKubeVersion("version", c.String("version")); err != nil {
			return err
		}
	}
	if err := positiveDuration(c, "timeout"); err != nil {
		return err
	}
	if err := g.checkProviderFlags(c); err != nil {
		return err
	}
	if c.Int("etcd-heartbeat-ms") <= 0 || c.Int("etcd-election-ms") < 5*c.Int("etcd-heartbeat-ms") {
		return usageErr("--etcd-heartbeat-ms must be positive and --etcd-election-ms at least 5 times it (etcd's rule), got %d and %d", c.Int("etcd-heartbeat-ms"), c.Int("etcd-election-ms"))
	}
	return nil
}

// localUpOptions reads the flags of 'local up' into local.Up's options.
func localUpOptions(c *cli.Context) (local.UpOptions, error) {
	o := local.UpOptions{Version: c.String("version"), ExtraArgs: c.StringSlice("extra-args"), Env: map[string]string{
		"ETCD_HEARTBEAT_MS": fmt.Sprint(c.Int("etcd-heartbeat-ms")),
		"ETCD_ELECTION_MS":  fmt.Sprint(c.Int("etcd-election-ms")),
	}, ControlPlane: c.String("control-plane"), KubeAPIServerDir: c.String("kube-apiserver-dir"), Addresses: c.String("addresses"),
		Certificates: hamasterflavor.ReplicaFiles} // the local provider's masters are in hamaster's own format
	if cp := o.ControlPlane; cp != "" && cp != "standin" && cp != "real" {
		return o, usageErr("--control-plane %q: want standin or real", cp)
	}
	if a := o.Addresses; a != "" && a != local.AddressesLoopback && a != local.AddressesBenchmark {
		return o, usageErr("--addresses %q: want %s or %s", a, local.AddressesLoopback, local.AddressesBenchmark)
	}
	return o, nil
}

// localUpPlan prints what 'local up --dry-run' would do.
func localUpPlan(e *env, g *globals) error {
	return g.result(e, fmt.Sprintf("Plan: local up %s: cluster record, CA, master-0 %s, static IP attached. Dry run: nothing was changed.", g.cluster, local.MasterName(g.cluster)),
		map[string]any{"schema": 1, "kind": "plan", "workflow": "local-up", "cluster": g.cluster, "provider": local.Name, "dry_run": true,
			"steps": []map[string]any{{"index": 1, "name": "local-up", "calls": []string{"cluster record", "CA", "master-0 " + local.MasterName(g.cluster), "static IP attached"}}}})
}

func localDownCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "down",
		Usage: "stop every process of a local cluster and remove its state",
		Description: `Example:
  hamaster --cluster demo local down --yes`,
		Flags:  mutatingFlags(),
		Action: func(c *cli.Context) error { return localDown(c, e, g) },
	}
}

// localDown is the action of 'local down'.
func localDown(c *cli.Context, e *env, g *globals) error {
	if err := g.mutating(c, e); err != nil {
		return err
	}
	if g.provider != local.Name {
		return usageErr("--provider: 'local down' needs --provider local, not %q", g.provider)
	}
	plan := fmt.Sprintf("Plan: stop the load balancer and every replica of %s, remove %s/%s (its CA, journals and every snapshot).\n", g.cluster, g.stateDir, g.cluster)
	if g.dryRun {
		return g.result(e, fmt.Sprintf("Plan: stop the load balancer and every replica of %s, remove %s/%s. Dry run: nothing was changed.", g.cluster, g.stateDir, g.cluster),
			map[string]any{"schema": 1, "kind": "plan", "workflow": "local-down", "cluster": g.cluster, "provider": local.Name, "dry_run": true,
				"steps": []map[string]any{{"index": 1, "name": "local-down", "calls": []string{"stop the load balancer and every replica", "remove " + g.stateDir + "/" + g.cluster}}}})
	}
	if err := g.confirm(e)(plan); err != nil {
		return err
	}
	if err := local.Down(c.Context, g.settings(c)); err != nil {
		return fmt.Errorf("local down %s: %w", g.cluster, err)
	}
	return g.result(e, fmt.Sprintf("cluster %s is down; nothing of it is left", g.cluster), map[string]any{"cluster": g.cluster, "state": "down"})
}
