package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/tfexternal"
	"github.com/hamaster/hamaster/workflows"
)

// knownProviders are the names --provider accepts; registry() holds the
// ones built so far.
var knownProviders = []string{"local", "gce", "aws", "metal"}

func terraformCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:      "terraform",
		Usage:     "Terraform external data source: read the HA state (endpoint, replicas, etcd initial cluster for the next replica) as JSON strings",
		ArgsUsage: " ",
		Description: `Implements the protocol of Terraform's "external" data source
(hashicorp/external): reads ONE JSON object of strings on stdin (the data
source's query) and prints ONE flat JSON object of strings on stdout (its
result). Read-only: changes nothing, takes no lock, prints no progress.
On an error it prints one line to stderr, nothing to stdout, and exits 1.

Query keys: cluster, provider, state_dir (each defaults to --cluster,
--provider, --state-dir), next_replica_name, next_replica_address (the
IP reserved for the next replica, so etcd_initial_cluster can include
it); any other key is passed to the provider as the setting of that name
(gce-project, metal-inventory, ssh-key, ...), over the same setting from a flag or HAMASTER_*
variable (HAMASTER_METAL_INVENTORY, HAMASTER_SSH_KEY, ...), which are read
as every command reads them. The cluster's flavor is the one recorded in
its state directory (or --flavor); the CA whose digest ca_cert_sha256 is
hamaster's, or the masters' own when they carry theirs (kubeadm, kube-up).

Result keys: cluster provider endpoint endpoint_kind static_ip dns_name
replicas replica_addresses replica_map replica_count leader healthy
etcd_initial_cluster etcd_initial_cluster_existing
etcd_initial_cluster_state next_replica_name next_replica_peer_url
versions ca_cert_sha256 cert_expiry. See examples/terraform.

Example:
  data "external" "hamaster" {
    program = ["hamaster", "terraform"]
    query   = { cluster = "prod", provider = "local", state_dir = "/var/lib/hamaster" }
  }

  echo '{"cluster":"demo"}' | hamaster terraform`,
		Flags: readOnlyFlags(),
		Action: func(c *cli.Context) error {
			out, err := terraformRead(c, e, g)
			if err != nil {
				// No error kind: Terraform only cares about non-zero, and
				// the protocol's failure is exit 1 with one line on stderr.
				return errors.New("terraform: " + tfexternal.OneLine(err.Error()))
			}
			_, err = e.stdout.Write(out)
			return err
		},
	}
}

// terraformRead does the whole read and returns the result document; it
// writes nothing, so stdout stays empty on any error.
func terraformRead(c *cli.Context, e *env, g *globals) ([]byte, error) {
	q, err := terraformQuery(c, e)
	if err != nil {
		return nil, err
	}
	t, err := terraformTarget(g, q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	d, err := terraformDeps(ctx, c, g, t, q)
	if err != nil {
		return nil, err
	}
	defer d.Provider.Close()
	rep, err := workflows.Status(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("read the state of cluster %s: %w", t.cluster, err)
	}
	if ctx.Err() != nil {
		return nil, terraformTimeout(ctx, c, rep, t.cluster)
	}
	caPEM, err := terraformCA(ctx, d, t)
	if err != nil {
		return nil, err
	}
	res, err := tfexternal.Result(rep, tfexternal.Inputs{CACertPEM: caPEM, NextReplicaName: q.NextReplicaName, NextReplicaAddress: q.NextReplicaAddress})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// terraformQuery checks the command line of terraform and reads the
// query from stdin.
func terraformQuery(c *cli.Context, e *env) (tfexternal.Query, error) {
	if err := applyConfig(c, e, c.Command.Flags, false); err != nil {
		return tfexternal.Query{}, err
	}
	if c.Args().Len() > 0 {
		return tfexternal.Query{}, fmt.Errorf("takes no arguments (got %q); the query is read from stdin", c.Args().Slice())
	}
	if c.Duration("timeout") <= 0 {
		return tfexternal.Query{}, errors.New("--timeout must be positive")
	}
	stdin := e.stdin
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return tfexternal.ParseQuery(stdin)
}

// tfTarget is the cluster a terraform query reads.
type tfTarget struct {
	cluster, provider, stateDir string
}

// terraformTarget is the query's cluster, provider and state dir, each
// defaulting to --cluster, --provider and --state-dir, all checked.
func terraformTarget(g *globals, q tfexternal.Query) (tfTarget, error) {
	t := tfTarget{cluster: g.cluster, provider: g.provider, stateDir: g.stateDir}
	if q.Cluster != "" {
		if validClusterName(q.Cluster) != nil {
			return t, fmt.Errorf("query key cluster: %q is not a cluster name (1-40 lower-case letters, digits and inner dashes)", q.Cluster)
		}
		t.cluster = q.Cluster
	}
	if q.Provider != "" {
		t.provider = q.Provider
	}
	if q.StateDir != "" {
		t.stateDir = q.StateDir
	}
	if n := q.NextReplicaName; n != "" && validClusterName(n) != nil {
		return t, fmt.Errorf("query key next_replica_name: %q is not a replica name (1-40 lower-case letters, digits and inner dashes, as add-replica --name takes)", n)
	}
	return t, nil
}

// terraformDeps opens t's provider with its flavor bound and returns the
// workflows' dependencies on it, every output discarded; the caller
// closes d.Provider.
func terraformDeps(ctx context.Context, c *cli.Context, g *globals, t tfTarget, q tfexternal.Query) (*workflows.Deps, error) {
	reg := registry()
	if !slices.Contains(reg.Names(), t.provider) {
		if slices.Contains(knownProviders, t.provider) {
			return nil, fmt.Errorf("provider %q is not available in this build yet (available: %s)", t.provider, strings.Join(reg.Names(), ", "))
		}
		return nil, fmt.Errorf("unknown provider %q (valid: %s)", t.provider, strings.Join(reg.Names(), ", "))
	}
	// The provider's settings as every command reads them (flags,
	// HAMASTER_* variables, the config file), a query key of the same
	// name winning; nothing may reach stdout but the result.
	quiet := slog.New(slog.DiscardHandler)
	s := g.settings(c)
	s.Cluster, s.StateDir, s.Out, s.Logger = t.cluster, t.stateDir, io.Discard, quiet
	maps.Copy(s.Options, q.Options)
	var err error
	if s.Flavor, err = namedFlavor(g.flavor, t.stateDir, t.cluster); err != nil {
		return nil, err
	}
	p, master, err := flavorregistry.Bind(ctx, reg, t.provider, s)
	if err != nil {
		return nil, err
	}
	return &workflows.Deps{
		Provider: p, Master: master, Cluster: t.cluster, StateDir: t.stateDir,
		Sink: &workflows.JSONSink{W: io.Discard}, Logger: quiet, Out: io.Discard,
		Holder: "terraform",
	}, nil
}

// terraformTimeout is the error of a read that outlived --timeout: parts
// read after the deadline are failures of our own making, so the timeout
// is reported instead of a half-read state.
func terraformTimeout(ctx context.Context, c *cli.Context, rep workflows.Report, cluster string) error {
	why := rep.MembersError
	for _, r := range rep.Replicas {
		if why == "" && r.Error != "" {
			why = r.Name + ": " + r.Error
		}
	}
	if why == "" {
		why = ctx.Err().Error()
	}
	return fmt.Errorf("cluster %s did not answer within --timeout %s (%s)", cluster, c.Duration("timeout"), why)
}

// terraformCA is the PEM of the CA whose digest the result carries.
func terraformCA(ctx context.Context, d *workflows.Deps, t tfTarget) ([]byte, error) {
	if d.FlavorCaps().ReplicaCertIssuer == nil {
		// The masters' own CA (kubeadm's /etc/kubernetes/pki/ca.crt,
		// kube-up's CA_CERT): hamaster keeps none for them.
		caPEM, err := d.Flavor().MasterCA(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the masters' CA certificate of cluster %s: %w", t.cluster, err)
		}
		return caPEM, nil
	}
	caPEM, err := os.ReadFile(filepath.Join(workflows.PKIDir(t.stateDir, t.cluster), "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read the CA certificate of cluster %s: %w", t.cluster, err)
	}
	return caPEM, nil
}
