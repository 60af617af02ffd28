package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// Validation that runs before anything changes and before the cluster lock
// is taken: every refusal here exits 2 and leaves the cluster as it was.

// noPositionalArgs refuses positional arguments on commands that take none
// (a stray word is usually a mistyped flag: "--name x y").
func noPositionalArgs(c *cli.Command) {
	if len(c.Subcommands) > 0 {
		for _, sub := range c.Subcommands {
			noPositionalArgs(sub)
		}
		return
	}
	prev := c.Before
	c.Before = func(ctx *cli.Context) error {
		if ctx.NArg() > 0 {
			return usageErr("%s takes no positional arguments, got %q (flags go before them? values with spaces need quotes)", ctx.Command.FullName(), strings.Join(ctx.Args().Slice(), " "))
		}
		if prev != nil {
			return prev(ctx)
		}
		return nil
	}
}

// drainDurations checks the flags of a command that drains replicas from
// the LB: --drain-grace not negative, bound (the flag of its wait)
// positive.
func drainDurations(c *cli.Context, bound string) error {
	if c.Duration("drain-grace") < 0 {
		return usageErr("--drain-grace: must not be negative")
	}
	return positiveDuration(c, bound)
}

// nodeDrainFlags are remove-replica's and rolling-upgrade's choice of
// what happens to a master's Node first (kubeadm's masters: drained).
func nodeDrainFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "skip-drain", Usage: "kubeadm: do not drain the master's Node first (its pods, PodDisruptionBudgets or not, go down with it)"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 5 * time.Minute, Usage: "kubeadm: bound of the drain of a master's Node (kubectl drain --timeout); a drain that does not finish is refused, naming the PodDisruptionBudgets that hold it"},
	}
}

// drainingProviderFlags are the flags remove-replica and rolling-upgrade
// share after their own: nodeDrainFlags, then the provider's.
func drainingProviderFlags() []cli.Flag {
	return append(nodeDrainFlags(), providerFlags(true)...)
}

// nodeDrain reads nodeDrainFlags.
func nodeDrain(c *cli.Context) (workflows.NodeDrain, error) {
	if err := positiveDuration(c, "drain-timeout"); err != nil {
		return workflows.NodeDrain{}, err
	}
	return workflows.NodeDrain{Skip: c.Bool("skip-drain"), Timeout: c.Duration("drain-timeout")}, nil
}

// positiveDuration refuses zero and negative durations: "-5s" is an
// error, not a silent default.
func positiveDuration(c *cli.Context, flag string) error {
	if d := c.Duration(flag); d <= 0 {
		return usageErr("--%s: %s must be positive", flag, d)
	}
	return nil
}

// parseKubeVersion parses a Kubernetes version such as v1.31.0: a leading
// v, semantic version, nothing else (no spaces, no newline).
func parseKubeVersion(flag, s string) (*utilversion.Version, error) {
	if s == "" {
		return nil, usageErr("--%s: required: a Kubernetes version such as v1.31.0", flag)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, usageErr("--%s: %q contains whitespace or control characters; want a Kubernetes version such as v1.31.0", flag, s)
	}
	if !strings.HasPrefix(s, "v") {
		return nil, usageErr("--%s: %q must start with v, e.g. v1.31.0", flag, s)
	}
	v, err := utilversion.ParseSemantic(s)
	if err != nil {
		return nil, usageErr("--%s: %q is not a Kubernetes version such as v1.31.0: %v", flag, s, err)
	}
	return v, nil
}

// checkUpgradePath refuses a downgrade and a minor-version skip from any
// replica's current version, unless allowed.
func checkUpgradePath(target *utilversion.Version, rs []providers.Replica, allowDowngrade, allowSkew bool) error {
	for _, r := range rs {
		cur, err := utilversion.ParseSemantic(r.Template.Version)
		if err != nil {
			continue // a version we cannot read is not ours to judge
		}
		if target.LessThan(cur) && !allowDowngrade {
			return usageErr("--version: v%s is older than %s's %s: a downgrade (pass --allow-downgrade if you mean it; etcd data written by the newer version may not be readable)", target, r.Name, r.Template.Version)
		}
		if !allowSkew && (target.Major() != cur.Major() || target.Minor() > cur.Minor()+1) {
			return usageErr("--version: v%s is more than one minor version ahead of %s's %s (Kubernetes supports one minor at a time; upgrade step by step, or pass --allow-skew)", target, r.Name, r.Template.Version)
		}
	}
	return nil
}

// validDNSName checks an RFC 1123 host name (labels of letters, digits and
// inner dashes, 1-63 characters, 253 in all; a trailing dot is allowed).
func validDNSName(flag, name string) error {
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return usageErr("--%s: %q must be a DNS name of 1-253 characters", flag, name)
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return usageErr("--%s: %q has an empty or over-long label", flag, name)
		}
		for i, r := range label {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(label)-1
			if !ok {
				return usageErr("--%s: %q is not a valid DNS name (letters, digits and inner dashes per label)", flag, name)
			}
		}
	}
	return nil
}

// executableFile checks that path is a regular file with an execute bit.
func executableFile(flag, path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return usageErr("--%s: %v", flag, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return usageErr("--%s: %s is not an executable file", flag, path)
	}
	return nil
}

// checkProviderFlags validates the provider settings every command shares.
func (g *globals) checkProviderFlags(c *cli.Context) error {
	if c.IsSet("keep-snapshots") && c.Int("keep-snapshots") < 1 {
		return usageErr("--keep-snapshots: %d must be at least 1 (the snapshot a command just took is always kept)", c.Int("keep-snapshots"))
	}
	if g.provider == "local" {
		if err := executableFile("node-binary", c.String("node-binary")); err != nil {
			return err
		}
	}
	if v := c.String("subnet"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 254 {
			return usageErr("--subnet: %q must be a number from 1 to 254 (the N of 127.0.N.0/24)", v)
		}
	}
	return nil
}

// openCheckedProvider validates the provider settings, then opens the
// provider: what every changing command does before anything else.
func (g *globals) openCheckedProvider(c *cli.Context) (providers.Provider, error) {
	if err := g.checkProviderFlags(c); err != nil {
		return nil, err
	}
	return g.openProvider(c)
}

// checkNewReplicaName refuses add-replica --name of a replica that already
// exists, unless an unfinished add-replica of that very name is being
// resumed.
func checkNewReplicaName(ctx context.Context, g *globals, p providers.Provider, name string) error {
	if name == "" {
		return nil
	}
	_, err := p.Instances().Get(ctx, name)
	if errors.Is(err, errkind.NotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up replica %s: %w", name, err)
	}
	j, err := workflows.NewJournalStore(g.stateDir, g.cluster).Load()
	if err != nil {
		return err
	}
	if j != nil && !j.Finished && j.Workflow == "add-replica" && j.Params["name"] == name {
		return nil // resuming its own interrupted add
	}
	return usageErr("--name: replica %s already exists in cluster %s; pick another name or leave --name out", name, g.cluster)
}

// takesNoArgs reports whether a command (and its subcommands) takes no
// positional arguments (terraform has its own protocol for them).
func takesNoArgs(name string) bool {
	switch name {
	case "etcd", "local", "add-replica", "remove-replica", "rolling-upgrade", "status", "recover", "snapshots", "rotate-certs", "kubeconfig":
		return true
	}
	return false
}
