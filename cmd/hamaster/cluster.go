package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	hamasterflavor "github.com/hamaster/hamaster/flavors/hamaster"
	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/workflows"
)

// registry wires every provider in one place.
func registry() *providers.Registry {
	r := providers.NewRegistry()
	r.Register(local.Name, local.New)
	r.Register(gce.Name, gce.New)
	r.Register(awsp.Name, awsp.New)
	r.Register(metal.Name, metal.New)
	return r
}

func (g *globals) settings(c *cli.Context) providers.Settings {
	out := c.App.Writer
	if g.json() {
		out = c.App.ErrWriter // stdout carries JSON only
	}
	return providers.Settings{Cluster: g.cluster, StateDir: g.stateDir, Out: out, Logger: g.logger, Recognize: flavorregistry.Recognize, Options: map[string]string{
		local.OptNodeBinary: c.String("node-binary"),
		local.OptSubnet:     c.String("subnet"),

		// gce provider (Application Default Credentials; --dns clouddns needs --dns-zone)
		gce.OptProject:       c.String("gce-project"),
		gce.OptEndpoint:      c.String("gce-endpoint"),
		gce.OptRegion:        c.String("gce-region"),
		gce.OptZones:         c.String("gce-zone"),
		gce.OptNetwork:       c.String("gce-network"),
		gce.OptSubnetwork:    c.String("gce-subnetwork"),
		gce.OptMasterName:    c.String("gce-master-name"),
		gce.OptAPIServerPort: c.String("gce-apiserver-port"),
		gce.OptDNSZone:       c.String("dns-zone"),
		remote.OptUser:       c.String("ssh-user"),
		remote.OptKey:        c.String("ssh-key"),
		remote.OptKnownHosts: c.String("ssh-known-hosts"),
		remote.OptInsecure:   strconv.FormatBool(c.Bool("ssh-insecure-skip-host-key-check")),
		remote.OptPort:       c.String("ssh-port"),
		remote.OptAgent:      g.sshAgent,
		gce.OptReleaseURL:    c.String("gce-release-url"),
		awsp.OptReleaseURL:   c.String("aws-release-url"),

		// aws provider (--dns route53 needs --hosted-zone-id)
		awsp.OptRegion:              c.String("aws-region"),
		awsp.OptEndpoint:            c.String("aws-endpoint"),
		awsp.OptSubnets:             c.String("aws-subnets"),
		awsp.OptHostedZoneID:        c.String("hosted-zone-id"),
		awsp.OptDeregistrationDelay: c.String("aws-deregistration-delay"),
		awsp.OptClientCIDRs:         c.String("aws-client-cidrs"),
		awsp.OptSSHBastion:          c.String("aws-ssh-bastion"),
		awsp.OptEndpointMode:        c.String("aws-endpoint-mode"),

		// metal provider (the SSH settings above are its too)
		metal.OptInventory: c.String("metal-inventory"),
		metal.OptVIP:       c.String("metal-vip"),
		metal.OptVIPPort:   c.String("metal-vip-port"),
	}}
}

// openProvider builds the provider for --provider with the cluster's
// flavor bound to it (g.master).
func (g *globals) openProvider(c *cli.Context) (providers.Provider, error) {
	reg := registry()
	known := false
	for _, n := range reg.Names() {
		known = known || n == g.provider
	}
	if !known {
		return nil, usageErr("--provider: %q is not available in this build yet (available: %s)", g.provider, strings.Join(reg.Names(), ", "))
	}
	s := g.settings(c)
	var err error
	if s.Flavor, err = namedFlavor(g.flavor, g.stateDir, g.cluster); err != nil {
		return nil, err
	}
	p, f, err := flavorregistry.Bind(c.Context, reg, g.provider, s)
	if err != nil {
		return nil, err
	}
	g.master = f
	return p, nil
}

// withDeps opens the provider (its flags checked) and runs fn with the
// workflows' dependencies on it; the provider is closed after.
func (g *globals) withDeps(c *cli.Context, e *env, fn func(p providers.Provider, d *workflows.Deps) error) error {
	p, err := g.openCheckedProvider(c)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(p, g.deps(c, e, p))
}

func (g *globals) deps(c *cli.Context, e *env, p providers.Provider) *workflows.Deps {
	var sink workflows.Sink = &workflows.TextSink{W: e.stdout}
	if g.json() {
		sink = &workflows.JSONSink{W: e.stdout}
	}
	out := e.stdout
	if g.json() {
		out = e.stderr // keep stdout JSON lines only; instructions go to people
	}
	d := &workflows.Deps{Provider: p, Master: g.master, Cluster: g.cluster, StateDir: g.stateDir, Sink: sink, Logger: g.logger, Out: out, Holder: c.Command.Name, KeepSnapshots: c.Int("keep-snapshots")}
	g.runInfo(e, d)
	d.AfterStep = faultHook(e) // nil unless built with -tags hamaster_faults
	return d
}

// confirm prints the plan and asks on a terminal; without one it refuses
// (exit 2) unless --yes.
func (g *globals) confirm(e *env) func(plan string) error {
	return func(plan string) error {
		// In --output json stdout carries JSON only: the text plan and the
		// question go to stderr.
		out := e.stdout
		if g.json() {
			out = e.stderr
		}
		if g.yes {
			if !g.json() {
				fmt.Fprint(e.stdout, plan)
			}
			return nil
		}
		fmt.Fprint(out, plan)
		f, ok := e.stdin.(*os.File)
		if !ok || !isTerminal(f) {
			return usageErr("not changing anything without confirmation: re-run with --yes (or --dry-run to only print the plan)")
		}
		fmt.Fprint(out, "Proceed? [y/N] ")
		line, _ := bufio.NewReader(f).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return errkind.Errorf(errkind.FailedPrecondition, "aborted by the operator")
		}
		return nil
	}
}

// isTerminal asks the kernel (golang.org/x/term: TCGETS on Linux,
// TIOCGETA on macOS), so /dev/null is not a terminal.
func isTerminal(f *os.File) bool {
	return term.IsTerminal(int(f.Fd()))
}

// mutatingFlags lets --yes and --dry-run also follow the command name
// ("hamaster add-replica --yes"); they mean the same as the global ones.
func mutatingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (same as the global --yes)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print the plan and change nothing (same as the global --dry-run)"},
	}
}

// mutating is the prologue of every command that changes a cluster: its
// flags from the environment and --config, the command-level --yes and
// --dry-run merged into the globals and, unless it is a dry run, a check
// that the state dir is writable before anything is changed.
func (g *globals) mutating(c *cli.Context, e *env) error {
	if err := applyConfig(c, e, c.Command.Flags, false); err != nil {
		return err
	}
	g.yes = g.yes || c.Bool("yes")
	g.dryRun = g.dryRun || c.Bool("dry-run")
	if g.dryRun {
		return nil
	}
	if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
		return usageErr("--state-dir %s is not writable: %v", g.stateDir, err)
	}
	f, err := os.CreateTemp(g.stateDir, ".writable-*")
	if err != nil {
		return usageErr("--state-dir %s is not writable: %v", g.stateDir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

func nodeBinaryFlag() cli.Flag {
	return &cli.StringFlag{Name: "node-binary", EnvVars: []string{"HAMASTER_NODE_BINARY"}, Usage: "local provider: `PATH` of hamaster-node (default: next to hamaster, then $PATH)"}
}

// readOnlyFlags are the flags of a command that reads the cluster: its
// own, --timeout (20 s by default) and the provider's.
func readOnlyFlags(own ...cli.Flag) []cli.Flag {
	return append(append(own, &cli.DurationFlag{Name: "timeout", Value: 20 * time.Second, Usage: "overall timeout"}), providerFlags(false)...)
}

// applyReadOnly fills the flags of readOnlyFlags from the environment
// and the config file, and checks --timeout.
func applyReadOnly(c *cli.Context, e *env) error {
	if err := applyConfig(c, e, c.Command.Flags, false); err != nil {
		return err
	}
	return positiveDuration(c, "timeout")
}

// providerFlags are the flags of every command that opens a provider:
// the local, gce, aws and metal settings, and --yes/--dry-run for the
// commands that change the cluster.
func providerFlags(mutating bool) []cli.Flag {
	flags := append([]cli.Flag{nodeBinaryFlag()}, gceFlags()...)
	flags = append(flags, awsFlags()...)
	flags = append(flags, metalFlags()...)
	if mutating {
		flags = append(flags, mutatingFlags()...)
		flags = append(flags, keepSnapshotsFlag())
	}
	return flags
}

// awsFlags are the aws provider's settings (HAMASTER_<NAME> too; the SDK
// also reads AWS_REGION, AWS_ENDPOINT_URL and the credential chain).
func awsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "aws-region", EnvVars: []string{"HAMASTER_AWS_REGION"}, Usage: "aws provider: `REGION` (default: the SDK's chain, e.g. AWS_REGION)"},
		&cli.StringFlag{Name: "aws-endpoint", EnvVars: []string{"HAMASTER_AWS_ENDPOINT"}, Usage: "aws provider: base endpoint `URL` of every service (tests: moto; AWS_ENDPOINT_URL works too)"},
		&cli.StringFlag{Name: "aws-release-url", EnvVars: []string{"HAMASTER_AWS_RELEASE_URL"}, Usage: "aws provider: where kube-up masters get a new --version from, `URL` of release directories (default https://dl.k8s.io/release); as --gce-release-url"},
		&cli.StringFlag{Name: "aws-subnets", EnvVars: []string{"HAMASTER_AWS_SUBNETS"}, Usage: "aws provider: subnets of new replicas by zone, `zone=subnet-id,...`"},
		&cli.StringFlag{Name: "hosted-zone-id", EnvVars: []string{"HAMASTER_HOSTED_ZONE_ID"}, Usage: "aws provider, --dns route53: the hosted zone `ID`"},
		&cli.StringFlag{Name: "aws-deregistration-delay", EnvVars: []string{"HAMASTER_AWS_DEREGISTRATION_DELAY"}, Usage: "aws provider: how long the NLB drains a deregistered master's open connections (watches) before closing them, `DURATION` in whole seconds 0s-3600s (default 120s); --drain-grace comes after it"},
		&cli.StringFlag{Name: "aws-endpoint-mode", EnvVars: []string{"HAMASTER_AWS_ENDPOINT_MODE"}, Usage: "aws provider: how clients reach the apiservers once there are several masters, `MODE` dns (the Route53 name becomes an alias to the NLB once it serves; master 0 keeps the Elastic IP; no outage; the default with --hosted-zone-id) or eip-handover (the Elastic IP moves to the NLB: minutes of outage; the default without a hosted zone)"},
		&cli.StringFlag{Name: "aws-ssh-bastion", EnvVars: []string{"HAMASTER_AWS_SSH_BASTION"}, Usage: "aws provider, with --ssh-user: reach each master's etcd by jumping through this bastion's sshd, `HOST[:PORT]` (known_hosts checked), to the master's private address; without it, SSH goes to the master's public address"},
		&cli.StringFlag{Name: "aws-client-cidrs", EnvVars: []string{"HAMASTER_AWS_CLIENT_CIDRS"}, Usage: "aws provider: `CIDRS` clients reach the NLB from (default 0.0.0.0/0); the masters' security groups must allow them and the VPC on the apiserver port, or promotion stops naming the missing rule"},
	}
}

// metalFlags are the metal provider's settings (HAMASTER_<NAME> too, as
// bin/metallab's hamaster.env sets them); its SSH settings are the
// shared --ssh-key, --ssh-known-hosts and
// --ssh-insecure-skip-host-key-check (gceFlags).
func metalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "metal-inventory", EnvVars: []string{"HAMASTER_METAL_INVENTORY"}, Usage: "metal provider (required): the YAML `FILE` listing your hosts — vip: the endpoint's address; hosts: name, address, role control-plane|worker, optional ssh {user, port}, zone, rack (docs/metal.md). Masters run only on control-plane hosts; add-replica --host takes one, remove-replica frees it, clean"},
		&cli.StringFlag{Name: "metal-vip", EnvVars: []string{"HAMASTER_METAL_VIP"}, Usage: "metal provider: the cluster endpoint's `IP` (overrides the inventory's vip): an unused IPv4 address on the masters' subnet that keepalived moves between them; clients use VIP:--metal-vip-port"},
		&cli.StringFlag{Name: "metal-vip-port", EnvVars: []string{"HAMASTER_METAL_VIP_PORT"}, Usage: "metal provider: the `PORT` HAProxy serves the endpoint on, on every master (default 8443, as kubeadm's docs/ha-considerations.md; not 6443: the apiservers hold it on every address)"},
	}
}

// gceFlags are the gce provider's settings (HAMASTER_<NAME> too).
func gceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gce-project", EnvVars: []string{"HAMASTER_GCE_PROJECT"}, Usage: "gce provider: `PROJECT` id"},
		&cli.StringFlag{Name: "gce-endpoint", EnvVars: []string{"HAMASTER_GCE_ENDPOINT"}, Usage: "gce provider: base `URL` of the Compute and Cloud DNS APIs, without authentication: a fake's, e.g. bin/gcefake's (never set it for a real project)"},
		&cli.StringFlag{Name: "gce-region", EnvVars: []string{"HAMASTER_GCE_REGION"}, Usage: "gce provider: `REGION` (default: from the first zone)"},
		&cli.StringFlag{Name: "gce-zone", EnvVars: []string{"HAMASTER_GCE_ZONE"}, Usage: "gce provider: `ZONE[,ZONE...]` of the replicas (new replicas go to the least used)"},
		&cli.StringFlag{Name: "gce-network", EnvVars: []string{"HAMASTER_GCE_NETWORK"}, Usage: "gce provider: `NETWORK` (default global/networks/default)"},
		&cli.StringFlag{Name: "gce-subnetwork", EnvVars: []string{"HAMASTER_GCE_SUBNETWORK"}, Usage: "gce provider: `SUBNETWORK` of the internal addresses (default regions/<region>/subnetworks/default)"},
		&cli.StringFlag{Name: "gce-master-name", EnvVars: []string{"HAMASTER_GCE_MASTER_NAME"}, Usage: "gce provider: kube-up's MASTER_NAME, the first master's `NAME`; replicas are NAME-xyz (default <cluster>-master)"},
		&cli.StringFlag{Name: "gce-apiserver-port", EnvVars: []string{"HAMASTER_GCE_APISERVER_PORT"}, Usage: "gce provider: the `PORT` the masters' apiservers serve, and the LB's (default: the flavor's; kube-up's masters serve 443)"},
		&cli.StringFlag{Name: "gce-release-url", EnvVars: []string{"HAMASTER_GCE_RELEASE_URL"}, Usage: "gce provider: where kube-up masters get a new --version from, `URL` of release directories (default https://dl.k8s.io/release, as kube-up's upgrade.sh): rolling-upgrade writes <URL>/<version>/kubernetes-server-linux-amd64.tar.gz (and kubernetes-manifests.tar.gz) into kube-env with the hashes published beside them (.sha512), fetched before anything changes; point it at your mirror"},
		&cli.StringFlag{Name: "dns-zone", EnvVars: []string{"HAMASTER_DNS_ZONE"}, Usage: "gce provider, --dns clouddns: the Cloud DNS managed `ZONE`"},
		&cli.StringFlag{Name: "ssh-user", EnvVars: []string{"HAMASTER_SSH_USER"}, Usage: "gce and aws providers: reach etcd (on the masters' localhost) through SSH to a master as `USER`"},
		&cli.StringFlag{Name: "ssh-key", EnvVars: []string{"HAMASTER_SSH_KEY"}, Usage: "gce, aws and metal providers: SSH private key `FILE` (default: the agent at $SSH_AUTH_SOCK; metal: hamaster reaches every host as its inventory ssh.user)"},
		&cli.StringFlag{Name: "ssh-port", EnvVars: []string{"HAMASTER_SSH_PORT"}, Usage: "gce and aws providers: the masters' SSH `PORT` (default 22)"},
		&cli.StringFlag{Name: "ssh-known-hosts", EnvVars: []string{"HAMASTER_SSH_KNOWN_HOSTS"}, Usage: "gce, aws and metal providers: known_hosts `FILE` with the hosts' keys, each checked (default ~/.ssh/known_hosts)"},
		&cli.BoolFlag{Name: "ssh-insecure-skip-host-key-check", Usage: "gce, aws and metal providers: accept any SSH host key (anyone on the path can then read etcd traffic)"},
	}
}

func clusterCommands(e *env, g *globals) []*cli.Command {
	return []*cli.Command{
		{
			Name:  "local",
			Usage: "create or destroy a cluster on the embedded local provider (no cloud needed)",
			Subcommands: []*cli.Command{
				{
					Name:  "up",
					Usage: "create a single-master cluster: replicas are local processes running real etcd",
					Description: `Creates the cluster record, a CA, and master-0 (<cluster>-master) as a
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
           version, ~45 MB per replica (etcd included), ready in under a second
  real     kube-apiserver at --version, from --kube-apiserver-dir
           (<dir>/<version>/kube-apiserver; 'make kube-apiserver' builds
           v1.33.13 and v1.34.4), ~300 MB per replica, ready in ~3 s; a replica whose
           version has no binary there refuses to start its apiserver
For a real control plane: 'make kube-apiserver', then
'hamaster --cluster demo local up --control-plane real' (the newest built
version; --version v1.33.13 for the other)
and 'hamaster --cluster demo kubeconfig --file demo.kubeconfig' for kubectl.

Example:
  hamaster --cluster demo local up --version v1.30.2`,
					Flags: []cli.Flag{
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
					},
					Action: func(c *cli.Context) error {
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
						ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
						defer cancel()
						o := local.UpOptions{Version: c.String("version"), ExtraArgs: c.StringSlice("extra-args"), Env: map[string]string{
							"ETCD_HEARTBEAT_MS": fmt.Sprint(c.Int("etcd-heartbeat-ms")),
							"ETCD_ELECTION_MS":  fmt.Sprint(c.Int("etcd-election-ms")),
						}, ControlPlane: c.String("control-plane"), KubeAPIServerDir: c.String("kube-apiserver-dir"), Addresses: c.String("addresses"),
							Certificates: hamasterflavor.ReplicaFiles} // the local provider's masters are in hamaster's own format
						if cp := o.ControlPlane; cp != "" && cp != "standin" && cp != "real" {
							return usageErr("--control-plane %q: want standin or real", cp)
						}
						if a := o.Addresses; a != "" && a != local.AddressesLoopback && a != local.AddressesBenchmark {
							return usageErr("--addresses %q: want %s or %s", a, local.AddressesLoopback, local.AddressesBenchmark)
						}
						if g.dryRun {
							return g.result(e, fmt.Sprintf("Plan: local up %s: cluster record, CA, master-0 %s, static IP attached. Dry run: nothing was changed.", g.cluster, local.MasterName(g.cluster)),
								map[string]any{"schema": 1, "kind": "plan", "workflow": "local-up", "cluster": g.cluster, "provider": local.Name, "dry_run": true,
									"steps": []map[string]any{{"index": 1, "name": "local-up", "calls": []string{"cluster record", "CA", "master-0 " + local.MasterName(g.cluster), "static IP attached"}}}})
						}
						p, err := local.Up(ctx, g.settings(c), o, func(s string) { fmt.Fprintln(e.stderr, s) })
						if err != nil {
							return fmt.Errorf("local up %s: %w", g.cluster, err)
						}
						// Its masters are hamaster's own: the readiness probe
						// trusts the CA that flavor issues from.
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
					},
				},
				{
					Name:  "down",
					Usage: "stop every process of a local cluster and remove its state",
					Description: `Example:
  hamaster --cluster demo local down --yes`,
					Flags: mutatingFlags(),
					Action: func(c *cli.Context) error {
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
					},
				},
			},
		},
		addReplicaCommand(e, g),
		removeReplicaCommand(e, g),
		rollingUpgradeCommand(e, g),
		statusCommand(e, g),
		kubeconfigCommand(e, g),
		terraformCommand(e, g),
		recoverCommand(e, g),
		rotateCertsCommand(e, g),
		snapshotsCommand(e, g),
	}
}

func waitReady(ctx context.Context, d *workflows.Deps, ip string) error {
	base := fmt.Sprintf("https://%s:6443", ip)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := d.Probe(ctx, base, "/readyz")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s/readyz: %w (last: %v)", base, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func addReplicaCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "add-replica",
		Usage: "add a control-plane replica (the first add puts a load balancer on the static IP)",
		Description: `Preflight (etcd reachable, every voter healthy, no pending learner, cluster
lock) → etcd snapshot → clone a healthy replica's template → certificates
for the new replica → etcd member added as a LEARNER → VM created →
wait until caught up → promote to voter → first add only: move the
static IP to a new L4 load balancer (health-checked on /readyz) → add the
replica to the LB and wait until healthy → DNS (--dns-name) → verify.

Masters that join with their own tool (--flavor kubeadm, the metal
provider's) take another path: the first add brings the VIP up on the
master (keepalived + HAProxy: the distribution's packages, keepalived
>= 2.1.0 and HAProxy >= 2.0, run as the systemd units
hamaster-keepalived.service and hamaster-haproxy.service; a master
without them is refused before any change) and converts the cluster to
HA (every master's apiserver certificate gains the VIP, kubeadm-config's
controlPlaneEndpoint and cluster-info move to it, then every master's
kubeconfigs); the host is claimed and runs 'kubeadm join --control-plane'
with a fresh token and certificate key; a failed join is undone (no
learner, member or Node left); the host is added to HAProxy and keepalived
(--host picks it; the first free inventory host by default).

Re-running after a crash resumes at the first unfinished step.

Example:
  hamaster --cluster demo add-replica --yes`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", Aliases: []string{"host"}, Usage: "replica `NAME` (default <cluster>-master-<3 hex>; gce: --gce-master-name-<3 hex>, as kube-up names replicas; metal: the inventory host to take, default the first free one)"},
			&cli.StringFlag{Name: "zone", Usage: "zone/failure domain for the new replica (cloud providers)"},
			&cli.StringFlag{Name: "dns", Value: "static", Usage: "DNS `DRIVER`: static (print the records an operator must set), clouddns (gce, with --dns-zone) or route53 (aws, with --hosted-zone-id)"},
			&cli.StringFlag{Name: "dns-name", Usage: "DNS `NAME` of the endpoint; its A record is kept on the static IP"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "bound of each wait (caught up, LB healthy)"},
		}, providerFlags(true)...),
		Action: func(c *cli.Context) error {
			if err := g.mutating(c, e); err != nil {
				return err
			}
			if n := c.String("name"); n != "" {
				if err := validReplicaName(n); err != nil {
					return err
				}
			}
			if err := positiveDuration(c, "timeout"); err != nil {
				return err
			}
			if n := c.String("dns-name"); n != "" || c.IsSet("dns-name") {
				if err := validDNSName("dns-name", n); err != nil {
					return err
				}
			}
			p, err := g.openCheckedProvider(c)
			if err != nil {
				return err
			}
			defer p.Close()
			if _, err := p.DNS(c.String("dns")); err != nil {
				return err
			}
			if err := checkNewReplicaName(c.Context, g, p, c.String("name")); err != nil {
				return err
			}
			d := g.deps(c, e, p)
			wf := workflows.AddReplica(d, workflows.AddParams{Name: c.String("name"), Zone: c.String("zone"), DNSKind: c.String("dns"), DNSName: c.String("dns-name"), Timeout: c.Duration("timeout")})
			err = workflows.Execute(c.Context, d, wf, workflows.Options{
				DryRun: g.dryRun, Confirm: g.confirm(e), ShowPlan: g.showPlan(e),
				Defaults: func(params map[string]string) error {
					if params["name"] != "" {
						return nil
					}
					n, err := nextReplicaName(c.Context, d, params["zone"])
					params["name"] = n
					return err
				},
			})
			if n := c.String("dns-name"); err == nil && n != "" && !g.dryRun {
				// The replicas already there got certificates without it.
				err = rotateAfterDNS(c, e, g, d, n)
			}
			if err == nil && !g.dryRun {
				warnEvenVoters(c.Context, e, d, "add-replica")
			}
			return err
		},
	}
}

func removeReplicaCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "remove-replica",
		Usage: "remove a control-plane replica safely (the last-but-one removal demotes the LB)",
		Description: `Refuses to remove the last replica or one whose removal would leave etcd
without a healthy quorum (exit 3; --force overrides and names the risk).
On kubeadm's masters it also refuses, before anything changes, to remove
a master that something kubeadm rendered from the cluster's endpoint
still names by its own address (kube-proxy's kubeconfig, cluster-info,
another master's admin.conf or kubelet.conf: 'hamaster status' lists
them under PINNED TO ONE MASTER): exit 3 with the list and the command
that repoints them ('hamaster endpoint set --yes ENDPOINT'); --force
removes it anyway, with a warning naming them.
On kubeadm's masters the master's Node is drained first, as kubeadm's docs
ask (kubectl drain on another master: cordoned, its pods evicted honouring
PodDisruptionBudgets, DaemonSet pods left, bounded by --drain-timeout): a
drain that cannot finish stops the removal before anything else changes
(exit 3), naming each pod a budget holds, its Node uncordoned again;
--skip-drain removes the master without draining it.
Order: out of the load balancer, then a drain grace period → DNS →
etcd leadership moved away if the victim leads → member removed through
another replica → VM and disk deleted → when one replica is left, the LB is
deleted and the static IP given back to that replica. A replica whose
add-replica was interrupted can be removed too.

Example:
  hamaster --cluster demo remove-replica --name demo-master-8c7 --yes`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "replica `NAME` to remove (this or --member-id)"},
			&cli.StringFlag{Name: "member-id", Usage: "remove the etcd member `ID` (hex) that no replica owns: an orphan 'hamaster status' names"},
			&cli.BoolFlag{Name: "force", Usage: "remove even if etcd quorum would be at risk, or (kubeadm) the cluster's consumers still name the master's own address"},
			&cli.DurationFlag{Name: "drain-grace", Value: 10 * time.Second, Usage: "wait after draining from the LB before touching the replica"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "bound of each wait"},
		}, append(nodeDrainFlags(), providerFlags(true)...)...),
		Action: func(c *cli.Context) error {
			if err := g.mutating(c, e); err != nil {
				return err
			}
			if c.String("member-id") != "" {
				return removeMember(c, e, g)
			}
			if c.String("name") == "" {
				return usageErr("--name: required: the replica to remove (see 'hamaster status'), or --member-id for an orphan etcd member")
			}
			if err := drainDurations(c, "timeout"); err != nil {
				return err
			}
			nd, err := nodeDrain(c)
			if err != nil {
				return err
			}
			return g.withDeps(c, e, func(_ providers.Provider, d *workflows.Deps) error {
				name := c.String("name")
				wf := workflows.RemoveReplica(d, workflows.RemoveParams{Name: name, Force: c.Bool("force"), DrainGrace: c.Duration("drain-grace"), Timeout: c.Duration("timeout"), Drain: nd})
				err := workflows.Execute(c.Context, d, wf, workflows.Options{
					DryRun: g.dryRun, Confirm: g.confirm(e), Supersede: workflows.SupersedeAdd(name), LockExclude: []string{name}, ShowPlan: g.showPlan(e),
				})
				if err == nil && !g.dryRun {
					warnEvenVoters(c.Context, e, d, "remove-replica")
				}
				return err
			})
		},
	}
}

func statusCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show replicas, etcd members, load balancer targets, endpoint and certificates",
		Description: `Read-only; takes no lock. Exit 3 when the cluster is not healthy.

Example:
  hamaster --cluster demo status --output json`,
		Flags: readOnlyFlags(),
		Action: func(c *cli.Context) error {
			if err := applyReadOnly(c, e); err != nil {
				return err
			}
			return g.withDeps(c, e, func(p providers.Provider, d *workflows.Deps) error {
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				defer cancel()
				rep, err := workflows.Status(ctx, d)
				if err != nil {
					return err
				}
				// The local provider's replicas run the stand-in or the real
				// kube-apiserver (local up --control-plane).
				controlPlane := ""
				if cr := d.ProviderCaps().ControlPlaneReporter; cr != nil {
					controlPlane = cr.ControlPlane()
				}
				if g.json() {
					out := statusJSON(rep)
					if controlPlane != "" {
						out["control_plane"] = controlPlane
					}
					if err := writeJSON(e.stdout, out); err != nil {
						return err
					}
				} else {
					printStatus(e, rep)
					if controlPlane != "" {
						fmt.Fprintf(e.stdout, "\nCONTROL PLANE: %s\n", map[string]string{"standin": "standin (hamaster-node's apiserver stand-in: /readyz, /version, /kv)", "real": "real (kube-apiserver; hamaster kubeconfig writes a kubeconfig for it)"}[controlPlane])
					}
				}
				if rep.LB != nil && len(rep.LB.Holders()) > 1 {
					return errkind.Errorf(errkind.FailedPrecondition, "cluster %s is not healthy: the VIP %s is held by %s at once (split brain: are VRRP's adverts, IP protocol 112, blocked between them? docs/metal.md)",
						g.cluster, rep.LB.IP, strings.Join(rep.LB.Holders(), " and "))
				}
				if !rep.Healthy() {
					return errkind.Errorf(errkind.FailedPrecondition, "cluster %s is not healthy", g.cluster)
				}
				return nil
			})
		},
	}
}

func statusJSON(rep workflows.Report) map[string]any {
	targets := []map[string]any{}
	if rep.LB != nil {
		for _, t := range rep.LB.Targets {
			targets = append(targets, map[string]any{"name": t.Name, "healthy": t.Healthy, "draining": t.Draining, "reason": t.Reason})
		}
	}
	lbJSON := map[string]any{"present": rep.LB != nil, "targets": targets}
	if rep.LB != nil && rep.Provider == metal.Name { // a VIP on the masters
		lbJSON["holder"], lbJSON["viewer"] = rep.LB.Holder, rep.LB.Viewer
	}
	replicas := rep.Replicas
	if replicas == nil {
		replicas = []workflows.ReplicaStatus{}
	}
	out := map[string]any{
		"cluster":       rep.Cluster,
		"provider":      rep.Provider,
		"flavor":        rep.Flavor,
		"endpoint":      rep.Endpoint,
		"endpoint_kind": rep.EndpointKind,
		"static_ip":     rep.StaticIP,
		"dns_name":      rep.DNSName,
		"healthy":       rep.Healthy(),
		"replicas":      replicas,
		"members":       toMemberJSON(rep.Members),
		"lb":            lbJSON,
		"certificates":  rep.Certificates,
	}
	if rep.MembersError != "" {
		out["members_error"] = rep.MembersError
	}
	addStatusJSON(out, rep)
	addViewJSON(out, rep)
	if rep.Journal != nil {
		out["last_workflow"] = map[string]any{"workflow": rep.Journal.Workflow, "params": rep.Journal.Params, "finished": rep.Journal.Finished}
	}
	return out
}

func printStatus(e *env, rep workflows.Report) {
	w := e.stdout
	fmt.Fprintf(w, "cluster %s (%s, %s masters) endpoint %s [%s]", rep.Cluster, rep.Provider, rep.Flavor, rep.Endpoint, rep.EndpointKind)
	if rep.StaticIPHolder != "" {
		fmt.Fprintf(w, ", static IP attached to %s", rep.StaticIPHolder)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "\nREPLICAS")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tVERSION\tSTATE\tHEALTHY")
	for _, r := range rep.Replicas {
		h := "yes"
		if !r.Healthy {
			h = "NO: " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Address, r.Version, r.State, h)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nETCD MEMBERS")
	if rep.MembersError != "" {
		fmt.Fprintf(w, "unreachable: %s\n", rep.MembersError)
	} else {
		printMembers(w, rep.Members)
	}
	fmt.Fprintln(w, "\nLOAD BALANCER")
	if rep.LB == nil && rep.EndpointKind == "replica" {
		fmt.Fprintf(w, "none: the VIP %s is not up yet (the first add-replica brings it up); clients use the master's own address\n", rep.StaticIP)
	} else if rep.LB == nil {
		fmt.Fprintln(w, "none (the static IP is attached to a replica)")
	} else {
		viewed := rep.Provider == metal.Name // a VIP on the masters: who holds it, whose view
		if viewed {
			holder, view := rep.LB.Holder, "backends as "+rep.LB.Viewer+"'s HAProxy sees them"
			if holder == "" {
				holder = "NOBODY"
			}
			if hs := rep.LB.Holders(); len(hs) > 1 {
				holder = strings.Join(hs, " AND ") + " AT ONCE (split brain)"
			}
			if rep.LB.Viewer == "" {
				view = "no master's HAProxy answers"
			}
			fmt.Fprintf(w, "VIP %s held by %s; %s\n", rep.LB.IP, holder, view)
		}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if viewed {
			fmt.Fprintf(tw, "TARGET\tHEALTHY\tDRAINING\tHAPROXY\n")
		} else {
			fmt.Fprintf(tw, "TARGET\tHEALTHY\tDRAINING\n")
		}
		for _, t := range rep.LB.Targets {
			if viewed {
				fmt.Fprintf(tw, "%s\t%v\t%v\t%s\n", t.Name, t.Healthy, t.Draining, t.Reason)
			} else {
				fmt.Fprintf(tw, "%s\t%v\t%v\n", t.Name, t.Healthy, t.Draining)
			}
		}
		tw.Flush()
	}
	printView(w, rep)
	printPinned(w, rep)
	fmt.Fprintln(w, "\nAPISERVER CERTIFICATES")
	for _, c := range rep.Certificates {
		fmt.Fprintf(w, "%s: expires %s (in %dd); SANs: %s %s\n", c.Replica, c.NotAfter.Format(time.RFC3339), int(time.Until(c.NotAfter).Hours()/24), strings.Join(c.DNSNames, ","), strings.Join(c.IPs, ","))
	}
	if j := rep.Journal; j != nil && !j.Finished {
		fmt.Fprintf(w, "\nUNFINISHED: %s %v — re-run it to finish\n", j.Workflow, j.Params)
	}
	printStatusProblems(w, rep)
	printViewProblems(w, rep)
}

func rollingUpgradeCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "rolling-upgrade",
		Usage: "upgrade the control plane one replica at a time: drained, health-gated, rolled back on failure",
		Description: `Preflight: every replica and etcd voter healthy, no pending learner, quorum
survives one replica down, cluster lock, etcd snapshot (path printed).
Followers go first, the etcd leader last (leadership is moved to an
upgraded replica before it is touched). Replicas already at the target are
skipped, so a re-run resumes.

--strategy recreate, per replica: drain from the LB and wait --drain-grace →
record its last known-good template → recreate it with the new version and
flags on the same data disk → wait until its etcd member is healthy and
caught up, /readyz is 200 and /version reports --version → back in the LB →
LB sees it healthy. If it fails — recreating it fails, its process exits,
a component refuses to start (seen from the replica itself, within
seconds) — or it is not healthy within --health-timeout, its last
known-good template is restored, it is put back, and the command stops
with exit 1 naming the replica, the cause and the restored version.
--version must be a Kubernetes version; a downgrade or a minor skip needs
--allow-downgrade / --allow-skew.
On GCE and AWS masters built by kube-up.sh the version is the server
tarball the master downloads at boot (kube-env SERVER_BINARY_TAR_URL and
_HASH, and KUBE_MANIFESTS_TAR_URL and _HASH): --version V becomes V's
release under --gce-release-url / --aws-release-url (default
https://dl.k8s.io/release/V/...) with the
hashes published there (<tarball>.sha512), as kube-up's own upgrade.sh
writes them. A V with no release there is refused before anything changes,
naming the URL tried. A master still on kube-up's devel upload (a staging
bucket URL) has no known version until it is upgraded.
A single replica is refused (downtime) unless --allow-downtime.

--strategy surge, per replica: add a replica at the new version, then
remove an old one: never fewer healthy replicas than at the start. A new
replica that fails is removed with its etcd member and the command stops
(exit 1).

kubeadm's masters are upgraded in place with kubeadm (upgrade apply on the
first, upgrade node on the others), one at a time as kubeadm's docs ask:
the master's Node drained (kubectl drain, PodDisruptionBudgets honoured,
bounded by --drain-timeout; --skip-drain skips it), out of the LB,
upgraded, health-gated, back in the LB, its Node uncordoned; on failure
kubeadm's backup is restored and the Node uncordoned too. A drain that
cannot finish stops the run before that master is touched (exit 3),
naming the PodDisruptionBudgets that hold it.

Example:
  hamaster --cluster demo rolling-upgrade --version v1.31.0 --yes
  hamaster --cluster demo rolling-upgrade --version v1.31.0 --extra-args "--v=2" --yes`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "version", Usage: "target control-plane `VERSION` (required), e.g. v1.31.0"},
			&cli.StringFlag{Name: "strategy", Value: workflows.StrategyRecreate, Usage: "recreate|surge"},
			&cli.StringFlag{Name: "extra-args", Usage: "control-plane `FLAGS`, space-separated (replace the current ones; unset keeps them)"},
			&cli.DurationFlag{Name: "drain-grace", Value: 10 * time.Second, Usage: "wait after draining a replica from the LB before touching it"},
			&cli.DurationFlag{Name: "health-timeout", Value: 5 * time.Minute, Usage: "how long a replacement may take to become healthy before it is rolled back (the restored last known-good template then gets twice as long)"},
			&cli.BoolFlag{Name: "allow-downtime", Usage: "allow recreating a single replica (the control plane is down meanwhile)"},
			&cli.BoolFlag{Name: "allow-downgrade", Usage: "allow a --version older than a replica's"},
			&cli.BoolFlag{Name: "allow-skew", Usage: "allow a --version more than one minor version ahead of a replica's"},
		}, append(nodeDrainFlags(), providerFlags(true)...)...),
		Action: func(c *cli.Context) error {
			if err := g.mutating(c, e); err != nil {
				return err
			}
			v := c.String("version")
			target, err := parseKubeVersion("version", v)
			if err != nil {
				return err
			}
			strategy := c.String("strategy")
			if strategy != workflows.StrategyRecreate && strategy != workflows.StrategySurge {
				return usageErr("--strategy: %q is not valid (valid: recreate, surge)", strategy)
			}
			if err := drainDurations(c, "health-timeout"); err != nil {
				return err
			}
			nd, err := nodeDrain(c)
			if err != nil {
				return err
			}
			for _, a := range strings.Fields(c.String("extra-args")) {
				if !strings.HasPrefix(a, "-") {
					return usageErr("--extra-args: %q is not a flag (want --name=value words)", a)
				}
			}
			return g.withDeps(c, e, func(p providers.Provider, d *workflows.Deps) error {
				rs, err := p.Instances().List(c.Context)
				if err != nil {
					return err
				}
				if err := checkUpgradePath(target, rs, c.Bool("allow-downgrade"), c.Bool("allow-skew")); err != nil {
					return err
				}
				// Before the plan and the prompt (the workflow checks again
				// before its first step): a release that cannot be had is bad
				// input, refused with nothing changed (exit 2).
				if err := d.Flavor().CheckVersion(c.Context, v); err != nil {
					return err
				}
				params := workflows.UpgradeParams{
					Version: v, Strategy: strategy, DrainGrace: c.Duration("drain-grace"),
					HealthTimeout: c.Duration("health-timeout"), AllowDowntime: c.Bool("allow-downtime"),
					ExtraArgs: strings.Fields(c.String("extra-args")), ExtraArgsSet: c.IsSet("extra-args"), Drain: nd,
				}
				wf := workflows.RollingUpgrade(d, params, len(rs))
				return workflows.Execute(c.Context, d, wf, workflows.Options{DryRun: g.dryRun, Confirm: g.confirm(e), ShowPlan: g.showPlan(e), SoleReplicaOutage: params.AllowDowntime})
			})
		},
	}
}
